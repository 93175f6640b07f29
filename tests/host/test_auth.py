"""Keys like the Functions host: a real host with ``--auth keys`` on loopback, over real HTTP.

App routes by auth level (header and ``?code=``), the management API (system or master
key; a function key is refused), admin routes (master key), the open status probe,
check-status links (``code=``, never the ``Host`` header), key management, keys across a
restart, the SDK's client with auth on, the ``keys`` command, and bad keys - each refusal
a 401 with a JSON body that changes nothing, and no key ever in the log.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from durable_host.testing import PACKAGE_ROOT
from tests.harness import (
    APPS,
    WEBHOOK,
    HostProcess,
    Response,
    store_spec_for,
    store_specs,
    wait_for,
)

APP = APPS / "secured"
SETTING_MASTER = "m" * 20 + "SettingMasterKey-0123456789"


def keys_of(host: HostProcess) -> dict[str, Any]:
    """What ``python -m durable_host keys --json`` prints for the host's store."""
    env = {**os.environ, **host.env, "PYTHONPATH": str(PACKAGE_ROOT)}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "durable_host",
            "keys",
            "--app-dir",
            str(host.app_dir),
            "--store",
            host.store,
            "--json",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    )
    return json.loads(out.stdout)


def master(keys: dict[str, Any]) -> str:
    return str(keys["master"]["value"])


def function_key(keys: dict[str, Any]) -> str:
    return next(k["value"] for k in keys["host"] if k["name"] == "default")


def system_key(keys: dict[str, Any]) -> str:
    return next(k["value"] for k in keys["system"] if k["name"] == "durabletask_extension")


def with_key(key: str) -> dict[str, str]:
    return {"x-functions-key": key}


def code(key: str) -> str:
    return "code=" + urllib.parse.quote(key, safe="")


def assert_refused(resp: Response) -> None:
    assert resp.status == 401, (resp.status, resp.body)
    assert resp.headers.get("Content-Type", "").startswith("application/json")
    assert resp.json()["error"] == "unauthorized"


@pytest.fixture(scope="module", params=store_specs())
def secured(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[HostProcess]:
    tmp: Path = tmp_path_factory.mktemp("secured")
    host = HostProcess(APP, store_spec_for(str(request.param), tmp), args=["--auth", "keys"])
    host.start()
    yield host
    host.kill()


@pytest.fixture(scope="module")
def keys(secured: HostProcess) -> dict[str, Any]:
    return keys_of(secured)


def start_with(host: HostProcess, key: str, name: str = "parked") -> str:
    resp = host.post(f"{WEBHOOK}/orchestrators/{name}?{code(key)}")
    assert resp.status == 202, (resp.status, resp.body)
    return str(resp.json()["id"])


def status_with(host: HostProcess, instance_id: str, key: str) -> dict[str, Any] | None:
    resp = host.get(f"{WEBHOOK}/instances/{instance_id}", headers=with_key(key))
    assert resp.status in (200, 202, 404), (resp.status, resp.body)
    return resp.json() if resp.status != 404 else None


# --- app routes ----------------------------------------------------------------------------------


def test_app_routes_follow_their_auth_level_by_header_and_by_code(secured, keys) -> None:
    fkey, mkey, skey = function_key(keys), master(keys), system_key(keys)

    assert secured.get("/api/open").status == 200
    assert_refused(secured.get("/api/guarded"))
    assert_refused(secured.get("/api/guarded", headers=with_key("not-the-key")))
    assert_refused(secured.get("/api/guarded?code=wrong"))
    assert_refused(
        secured.get("/api/guarded", headers=with_key(skey))
    )  # a system key is no function key
    assert secured.get("/api/guarded", headers=with_key(fkey)).status == 200
    assert secured.get(f"/api/guarded?{code(fkey)}").status == 200
    assert secured.get(f"/api/guarded?{code(mkey)}").status == 200

    assert_refused(secured.get("/api/admin-only"))
    assert_refused(secured.get("/api/admin-only", headers=with_key(fkey)))
    assert_refused(secured.get(f"/api/admin-only?{code(skey)}"))
    assert secured.get("/api/admin-only", headers=with_key(mkey)).status == 200


def test_a_function_key_opens_only_its_function_until_it_is_revoked(secured, keys) -> None:
    mkey = master(keys)
    created = secured.request(
        "PUT", "/admin/functions/guarded/keys/partner", headers=with_key(mkey)
    )
    assert created.status == 201, created.body
    partner = created.json()["value"]

    assert secured.get("/api/guarded", headers=with_key(partner)).status == 200
    assert_refused(secured.get("/api/other", headers=with_key(partner)))
    listed = secured.get("/admin/functions/guarded/keys", headers=with_key(mkey)).json()
    assert {"name": "partner", "value": partner} in listed["keys"]

    assert (
        secured.request(
            "DELETE", "/admin/functions/guarded/keys/partner", headers=with_key(mkey)
        ).status
        == 204
    )
    assert_refused(secured.get("/api/guarded", headers=with_key(partner)))
    assert (
        secured.request(
            "DELETE", "/admin/functions/guarded/keys/partner", headers=with_key(mkey)
        ).status
        == 404
    )


# --- the management API ----------------------------------------------------------------------------


def test_the_management_api_needs_the_system_or_the_master_key(secured, keys) -> None:
    fkey, mkey, skey = function_key(keys), master(keys), system_key(keys)
    before = secured.get(f"{WEBHOOK}/instances", headers=with_key(mkey)).json()

    assert_refused(secured.post(f"{WEBHOOK}/orchestrators/parked"))
    assert_refused(secured.post(f"{WEBHOOK}/orchestrators/parked", headers=with_key(fkey)))
    assert_refused(secured.post(f"{WEBHOOK}/orchestrators/parked/refused-id?{code(fkey)}"))
    assert secured.get(f"{WEBHOOK}/instances", headers=with_key(mkey)).json() == before

    with_system = start_with(secured, skey)
    with_master = start_with(secured, mkey)
    for instance_id in (with_system, with_master):
        wait_for(
            lambda i=instance_id: (
                (status_with(secured, i, skey) or {}).get("runtimeStatus") == "Running"
            )
        )

    # Every other operation: refused without a key or with a function key, and nothing changes.
    target = f"{WEBHOOK}/instances/{with_system}"
    for method, path in (
        ("GET", target),
        ("POST", f"{target}/raiseEvent/never"),
        ("POST", f"{target}/terminate?reason=x"),
        ("POST", f"{target}/suspend"),
        ("POST", f"{target}/rewind"),
        ("POST", f"{target}/restart"),
        ("DELETE", target),
        ("DELETE", f"{WEBHOOK}/instances?createdTimeFrom=2000-01-01T00:00:00Z"),
        ("GET", f"{WEBHOOK}/entities/tally/k"),
        ("GET", "/durabletask/instances"),
        ("POST", "/durabletask/orchestrators/parked"),
    ):
        for headers in ({}, with_key(fkey)):
            assert_refused(
                secured.request(method, path, {} if method == "POST" else None, headers=headers)
            )
    assert status_with(secured, with_system, skey)["runtimeStatus"] == "Running"

    assert secured.post(f"{target}/terminate?reason=done&{code(skey)}").status == 202
    wait_for(lambda: status_with(secured, with_system, mkey)["runtimeStatus"] == "Terminated")
    assert_refused(secured.request("DELETE", target, headers=with_key(fkey)))
    assert status_with(secured, with_system, mkey) is not None
    purged = secured.request("DELETE", target, headers=with_key(skey))
    assert purged.status == 200 and purged.json() == {"instancesDeleted": 1}
    # The RPC base takes the system key too (the same handler), but no guessed RPC secret.
    assert (
        secured.get(f"/durabletask/instances/{with_master}", headers=with_key(skey)).status == 202
    )
    assert_refused(secured.get(f"/durabletask/{'x' * 43}/instances/{with_master}"))
    assert secured.post(f"{WEBHOOK}/instances/{with_master}/terminate?{code(mkey)}").status == 202


def test_admin_routes_need_the_master_key_and_status_stays_open(secured, keys) -> None:
    fkey, mkey, skey = function_key(keys), master(keys), system_key(keys)

    status = secured.get("/admin/host/status")
    assert status.status == 200 and status.json()["state"] == "Running"
    for path in (
        "/admin/host/metrics",
        "/admin/host/keys",
        "/admin/host/keys/_master",
        "/admin/host/systemkeys",
        "/admin/functions/guarded/keys",
        "/admin/anything",
    ):
        assert_refused(secured.get(path))
        assert_refused(secured.get(path, headers=with_key(fkey)))
        assert_refused(secured.get(path, headers=with_key(skey)))
    assert secured.get("/admin/host/metrics", headers=with_key(mkey)).status == 200
    assert secured.get("/admin/host/keys/_master", headers=with_key(mkey)).json() == {
        "name": "_master",
        "value": mkey,
    }
    assert_refused(
        secured.request("PUT", "/admin/host/keys/mine", {"value": "v" * 40}, headers=with_key(fkey))
    )
    assert secured.get("/admin/host/keys/mine", headers=with_key(mkey)).status == 404
    refused_delete = secured.request("DELETE", "/admin/host/keys/_master", headers=with_key(mkey))
    assert refused_delete.status == 400 and refused_delete.json()["error"] == "bad_request"
    short = secured.request(
        "PUT", "/admin/host/keys/mine", {"value": "short"}, headers=with_key(mkey)
    )
    assert short.status == 400


def test_rotating_the_system_key_moves_the_management_api_and_the_links_to_the_new_one(
    secured, keys
) -> None:
    mkey, old = master(keys), system_key(keys)
    path = "/admin/host/systemkeys/durabletask_extension"
    listed = secured.get("/admin/host/systemkeys", headers=with_key(mkey)).json()
    assert listed == {"keys": [{"name": "durabletask_extension", "value": old}]}

    rotated = secured.post(path, headers=with_key(mkey))
    try:
        assert rotated.status == 200
        new = rotated.json()["value"]
        assert new != old
        assert_refused(secured.get(f"{WEBHOOK}/instances", headers=with_key(old)))
        started = secured.post(f"{WEBHOOK}/orchestrators/parked?{code(new)}")
        assert started.status == 202 and started.json()["statusQueryGetUri"].endswith(code(new))
        secured.post(f"{WEBHOOK}/instances/{started.json()['id']}/terminate?{code(new)}")
    finally:  # the other tests of the module hold the old key
        restored = secured.request("PUT", path, {"value": old}, headers=with_key(mkey))
    assert restored.status == 200
    assert secured.get(f"{WEBHOOK}/instances", headers=with_key(old)).status == 200


# --- links ------------------------------------------------------------------------------------------


def test_check_status_links_carry_the_system_key_and_never_echo_the_host_header(
    secured, keys
) -> None:
    fkey, skey = function_key(keys), system_key(keys)
    evil = {"Host": "evil.example"}

    through_sdk = secured.post("/api/start/parked", headers={**with_key(fkey), **evil})
    through_webhook = secured.post(f"{WEBHOOK}/orchestrators/parked?{code(skey)}", headers=evil)

    for resp in (through_sdk, through_webhook):
        assert resp.status == 202, resp.body
        body = resp.json()
        links = [v for k, v in body.items() if k.endswith("Uri")]
        assert len(links) == 8 and all(
            link.startswith(secured.base_url + WEBHOOK) for link in links
        )
        assert all(f"&{code(skey)}" in link for link in links)
        assert "evil.example" not in resp.body.decode() + json.dumps(resp.headers)
        # The link works as it is handed out, and Location does not echo the Host header.
        followed = secured.get(
            body["statusQueryGetUri"].removeprefix(secured.base_url), headers=evil
        )
        assert followed.status == 202 and "evil.example" not in followed.headers["Location"]
        secured.post(
            body["terminatePostUri"].replace("{text}", "done").removeprefix(secured.base_url)
        )


# --- the SDK's client with auth on ----------------------------------------------------------------


def test_the_sdk_client_starts_queries_raises_and_purges_with_auth_on(secured, keys) -> None:
    fkey = function_key(keys)
    started = secured.post("/api/start/waiter", headers=with_key(fkey))
    assert started.status == 202, started.body
    instance_id = started.json()["id"]

    def manage(action: str) -> Any:
        resp = secured.post(f"/api/manage/{instance_id}/{action}", headers=with_key(fkey))
        assert resp.status == 200, (action, resp.status, resp.body)
        return resp.json()["result"]

    wait_for(lambda: manage("status") == "Running")
    manage("raise")
    done = wait_for(
        lambda: (
            (s := status_with(secured, instance_id, system_key(keys)))
            and s["runtimeStatus"] == "Completed"
            and s
        )
    )
    # The activity's own client (the engine's binding) read the status through the RPC base.
    assert done["output"] == {"activity": "seen Running", "event": json.dumps({"from": "client"})}
    assert manage("purge") == 1
    assert manage("status") is None

    manage("signal")
    assert wait_for(lambda: manage("entity") == 2)


# --- bad keys ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "how",
    [
        "missing",
        "empty",
        "wrong",
        "long-header",
        "absurd-query",
        "nul",
        "newline",
        "unicode",
        "prefix",
    ],
)
def test_bad_keys_are_refused_with_401_json(secured, keys, how: str) -> None:
    fkey = function_key(keys)
    headers: dict[str, str] = {}
    query = ""
    if how == "empty":
        headers = with_key("")
    elif how == "wrong":
        headers = with_key(fkey[:-1] + ("A" if fkey[-1] != "A" else "B"))
    elif how == "long-header":
        headers = with_key(fkey * 90)  # ~3.9 KB: inside the HTTP parser's limits
    elif how == "absurd-query":
        query = "?code=" + "k" * 7000
    elif how == "nul":
        query = "?code=" + urllib.parse.quote("\x00" + fkey)
    elif how == "newline":
        query = "?code=" + urllib.parse.quote(fkey + "\n")
    elif how == "unicode":
        query = "?code=" + urllib.parse.quote("ключ-" + fkey)
    elif how == "prefix":
        query = "?" + code(fkey[:20])
    for path in ("/api/guarded", f"{WEBHOOK}/instances", "/admin/host/metrics"):
        assert_refused(secured.get(path + query, headers=headers))


# --- keys: settings, restart, the command, the log ------------------------------------------------


@pytest.mark.parametrize("kind", store_specs())
def test_keys_survive_a_restart_settings_fix_keys_and_no_key_reaches_the_log(
    tmp_path: Path, kind: str
) -> None:
    host = HostProcess(
        APP,
        store_spec_for(kind, tmp_path),
        env={"DURABLE_HOST_MASTER_KEY": SETTING_MASTER},
        args=["--auth", "keys", "--public-url", "https://durable.example.com/hub/"],
    )
    host.start()
    try:
        first = keys_of(host)  # beside the running host: the store is opened read-only
        assert first["master"] == {
            "name": "_master",
            "value": SETTING_MASTER,
            "setting": "DURABLE_HOST_MASTER_KEY",
        }
        fkey = function_key(first)
        assert host.get("/api/guarded", headers=with_key(fkey)).status == 200
        fixed = host.request("PUT", "/admin/host/keys/_master", headers=with_key(SETTING_MASTER))
        assert fixed.status == 409 and "DURABLE_HOST_MASTER_KEY" in fixed.json()["message"]
        # Links name the public URL, whatever Host the request carried.
        started = host.post(f"{WEBHOOK}/orchestrators/parked?{code(system_key(first))}")
        assert started.json()["statusQueryGetUri"].startswith(
            "https://durable.example.com/hub/runtime/webhooks/durabletask/instances/"
        )
        assert host.get("/api/open").json()["url"] == "https://durable.example.com/hub/api/open"
        # Rotation: the old host function key stops working at once.
        rotated = host.post("/admin/host/keys/default", headers=with_key(SETTING_MASTER))
        assert rotated.status == 200
        new_fkey = rotated.json()["value"]
        assert_refused(host.get("/api/guarded", headers=with_key(fkey)))
        assert_refused(host.get("/api/guarded?code=" + "z" * 300))
        assert host.stop() == 0

        host.start()
        assert host.get("/api/guarded", headers=with_key(new_fkey)).status == 200
        assert_refused(host.get("/api/guarded", headers=with_key(fkey)))
        again = keys_of(host)
        assert function_key(again) == new_fkey and system_key(again) == system_key(first)
    finally:
        host.kill()

    log = host.log_path.read_text() if host.log_path else ""
    assert "auth: keys required (--auth keys)" in log
    assert "refused" in log and "without a valid key" in log
    assert log.count("without a valid key") <= 2  # at most one line a minute per process
    for secret in (SETTING_MASTER, fkey, new_fkey, system_key(first), "z" * 40):
        assert secret not in log


def test_the_keys_command_prints_every_key(secured, keys) -> None:
    env = {**os.environ, **secured.env, "PYTHONPATH": str(PACKAGE_ROOT)}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "durable_host",
            "keys",
            "--app-dir",
            str(APP),
            "--store",
            secured.store,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    ).stdout

    for value in (master(keys), function_key(keys), system_key(keys)):
        assert value in out
    assert "durabletask_extension" in out and "_master" in out


def test_auth_defaults_to_keys_beyond_loopback_and_to_off_on_loopback(tmp_path: Path) -> None:
    kind = store_specs()[0]
    wide = HostProcess(APP, store_spec_for(kind, tmp_path, "wide"), args=["--host", "0.0.0.0"])
    wide.start()
    try:
        assert_refused(wide.get("/api/guarded"))
        assert_refused(wide.get(f"{WEBHOOK}/instances"))
        assert wide.get("/admin/host/status").status == 200
    finally:
        wide.kill()
    wide_log = wide.log_path.read_text() if wide.log_path else ""
    assert "auth: keys required (the host listens beyond loopback (0.0.0.0))" in wide_log
    assert "set --public-url" in wide_log

    local = HostProcess(APP, store_spec_for(kind, tmp_path, "local"))
    local.start()
    try:
        assert local.get("/api/guarded").status == 200
        assert local.get(f"{WEBHOOK}/instances").status == 200
    finally:
        local.kill()
    local_log = local.log_path.read_text() if local.log_path else ""
    assert "auth is off: the host listens only on loopback (127.0.0.1)" in local_log


def test_an_unusable_key_setting_stops_the_host_with_one_line_that_does_not_echo_it(
    tmp_path: Path,
) -> None:
    weak = "weak\x01key"
    env = {**os.environ, "PYTHONPATH": str(PACKAGE_ROOT), "DURABLE_HOST_FUNCTION_KEY": weak}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "durable_host",
            "start",
            "--app-dir",
            str(APP),
            "--port",
            "0",
            "--store",
            store_spec_for("sqlite", tmp_path),
            "--auth",
            "keys",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )

    assert done.returncode == 2
    assert "DURABLE_HOST_FUNCTION_KEY must be 32-256 characters" in done.stderr
    assert weak not in done.stderr + done.stdout and "Traceback" not in done.stderr
