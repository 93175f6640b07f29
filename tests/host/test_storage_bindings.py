"""The Storage extension's input and output bindings on a real host over loopback, against Azurite:
blobs (str, bytes, InputStream, Out), queue output (one and a list), table input (one entity,
a filtered query with take) and output, binding expressions from each source, on HTTP
functions, an activity and a durable client function; outputs written only on success."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.browser import DevTools, browser, needs_chromium  # noqa: F401 - browser: a fixture
from tests.harness import APPS, ROOT, HostProcess, store_specs, wait_for
from tests.host.storage_support import APP, Account, env, module_host, unique
from tests.screenshots import save, window


@pytest.fixture(scope="module", params=store_specs())
def host(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, storage_account: str
) -> Iterator[HostProcess]:
    """One host for the module per store: these tests share it, each with names of its own."""
    process = module_host(request, tmp_path_factory, storage_account, "bindings").start()
    yield process
    process.kill()


@pytest.fixture
def account(storage_account: str) -> Account:
    return Account(storage_account)


def test_blob_output_then_input_and_a_missing_blob_is_none(host: HostProcess, account: Account):
    name = unique()
    assert host.request("GET", f"/api/files/{name}").status == 404  # input None: missing

    put = host.request("PUT", f"/api/files/{name}", raw=b"hello blob")

    assert (put.status, put.body) == (200, b"stored")
    assert account.blob("files", f"{name}.txt") == b"hello blob"
    assert host.get(f"/api/files/{name}").body == b"hello blob"
    # A queue output set to a list sends two messages; the queue trigger takes each.
    first = json.loads(account.wait_blob("results", f"{name}.json"))
    assert first["body"] == {"name": name, "text": "first"}
    account.wait_blob("results", f"{name}-2.json")


def test_a_failing_function_writes_none_of_its_outputs(host: HostProcess, account: Account):
    name = unique()

    resp = host.request("PUT", f"/api/files/{name}?fail=1", raw=b"never")

    assert resp.status == 500
    assert account.blob("files", f"{name}.txt") is None
    assert not any(name in m for m in account.messages(host.env["JOBS_QUEUE"]))


def test_a_storage_error_fails_the_invocation_not_the_host(host: HostProcess, account: Account):
    # "echo-{who}" resolves to a queue name the queue service refuses (a double hyphen).
    refused = host.post("/api/echo/bad--name", {"greeting": "hi"})

    assert refused.status == 500 and refused.json()["error"] == "function_failed"
    who = unique("w")
    assert host.post(f"/api/echo/{who}", {"greeting": "still"}).status == 200
    assert account.messages(f"echo-{who}") == [f"still {who}"]


def test_bytes_and_input_stream_inputs_and_a_generic_blob_output(
    host: HostProcess, account: Account
):
    name = unique()
    assert host.request("PUT", f"/api/raw/{name}", raw=b"\x00\x01ab").body == b"stored"

    assert json.loads(host.get(f"/api/raw/{name}").body) == {"type": "bytes", "hex": "00016162"}
    account.put_blob("raw", name, "text")
    stream = json.loads(host.get(f"/api/stream/{name}").body)
    # An input stream has no name outside a blob trigger, as the Python worker builds it.
    assert stream == {"type": "InputStream", "data": "text", "name": None}


def test_expressions_setting_datetime_rand_guid_route_and_json_body(
    host: HostProcess, account: Account
):
    assert host.post("/api/stamp").status == 200
    names = account.names(host.env["STAMP_CONTAINER"], "")  # this host's own container
    assert any(
        re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d-\d\d-\d\dZ/[0-9a-f-]{36}\.txt", n) for n in names
    ), names
    who = unique("w")

    assert host.post(f"/api/echo/{who}", {"greeting": "hi"}).status == 200

    assert account.messages(f"echo-{who}") == [f"hi {who}"]
    # A JSON body's property and a query parameter name the blob.
    name = unique("b")
    assert host.post("/api/named?v=7", {"filename": name}).status == 200
    assert account.blob("files", f"{name}-7.txt") == b"named by the body and the query"


def test_table_output_single_input_and_filtered_query_with_take(
    host: HostProcess, account: Account
):
    pk = unique("p")
    for rk, age in (("a", 30), ("b", 10), ("c", 40), ("d", 50)):
        resp = host.request("PUT", f"/api/people/{pk}/{rk}", {"Name": rk.upper(), "Age": age})
        assert resp.status == 200, resp.body

    one = json.loads(host.get(f"/api/people/{pk}/c").body)
    assert (one["PartitionKey"], one["RowKey"], one["Name"], one["Age"]) == (pk, "c", "C", 40)
    assert "Timestamp" in one
    assert host.get(f"/api/people/{pk}/zz").status == 404
    rows = json.loads(host.get(f"/api/people/{pk}").body)
    assert len(rows) == 2 and all(r["Age"] > 20 for r in rows)  # filter, then take=2
    # As the extension writes: without an ETag an insert (the row exists: the write fails),
    # with "odata.etag": "*" a replace, with the ETag read a replace only if unchanged.
    assert host.request("PUT", f"/api/people/{pk}/c", {"Age": 41}).status == 500
    star = {"Age": 42, "odata.etag": "*"}
    assert host.request("PUT", f"/api/people/{pk}/c", star).status == 200
    read = json.loads(host.get(f"/api/people/{pk}/c").body)
    assert read["Age"] == 42 and read["odata.etag"]
    changed = {"Age": 43, "odata.etag": read["odata.etag"]}
    assert host.request("PUT", f"/api/people/{pk}/c", changed).status == 200
    assert host.request("PUT", f"/api/people/{pk}/c", changed).status == 500  # stale ETag


def test_an_activity_and_a_client_function_carry_bindings(host: HostProcess, account: Account):
    name = unique("n")
    resp = host.request("POST", f"/api/notes/{name}", raw=b"first note")
    assert resp.status == 202, resp.body
    instance = resp.json()["id"]

    done = host.wait_for_status(instance, ("Completed",))

    assert done["output"] == {"had": None, "saved": "first note"}
    assert account.blob("notes", f"{name}.txt") == b"first note"
    assert f"started {instance}" in account.messages("audit")


def test_a_timer_function_writes_its_blob_output(host: HostProcess, account: Account):
    container = host.env["TIMER_CONTAINER"]  # this host's own: another's timer ran too

    def written() -> bool:
        return any(
            account.blob(container, name) == b"ran on startup"
            for name in account.names(container, "")
        )

    wait_for(written, 30, "the timer function's blob (runOnStartup)")


def test_the_dashboard_lists_queue_and_blob_functions_with_their_backlog(host: HostProcess):
    rows = {r["name"]: r for r in host.get("/admin/dashboard/api/storage").json()["functions"]}

    assert (
        rows["on_job"]["trigger"] == "queueTrigger" and rows["on_job"]["source"] == "%JOBS_QUEUE%"
    )
    assert isinstance(rows["on_job"]["waiting"], int)
    assert rows["on_sample"]["trigger"] == "blobTrigger"
    assert rows["on_sample"]["source"] == "%SAMPLES_CONTAINER%/{name}.txt"  # as configured


def test_next_wake_counts_a_message_waiting_for_a_queue_trigger(
    storage_account: str, account: Account, tmp_path: Path
):
    queue = unique("wake-")
    settings = {**os.environ, **env(storage_account, PLAIN_QUEUE=queue), "PYTHONPATH": str(ROOT)}

    def next_wake() -> dict:
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "durable_host",
                "next-wake",
                "--app-dir",
                str(APPS / APP),
                "--store",
                f"sqlite:{tmp_path / 'idle.db'}",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            env=settings,
            cwd=ROOT,
        )
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    account.send(queue, "wake up")

    assert next_wake()["runnable"] is True


@needs_chromium
def test_the_dashboard_page_shows_the_queues_and_blobs(
    host: HostProcess,
    browser: DevTools,  # noqa: F811 - the fixture imported above
    tmp_path: Path,
):
    browser.open(f"{host.base_url}/admin/dashboard#/storage")
    window(browser)
    cell = "document.querySelector('tr[data-function=on_job] td.waiting')?.textContent ?? ''"
    wait_for(lambda: browser.evaluate(cell).isdigit(), 30, "the on_job row with its backlog")
    rows = browser.evaluate(
        "[...document.querySelectorAll('#storage tbody tr')].map(tr => tr.dataset.function)"
    )
    assert {"on_job", "on_failing", "on_slow", "on_sample", "on_bad"} <= set(rows)
    save(browser, tmp_path, "dashboard-storage")
