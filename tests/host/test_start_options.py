"""``start`` with Core Tools' habits: local.settings.json's Host section, --functions, --cors,
the list of functions at start-up, and one clear line with exit status 2 for bad input."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from tests.harness import APPS, ROOT, HostProcess

SAMPLE = APPS / "devtool"


def run_start(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """A start that is expected to fail before it serves."""
    return subprocess.run(
        [sys.executable, "-m", "durable_host", "start", "--port", "0", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, result
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("durable host: ")
    return lines[0]


def app_copy(tmp_path: Path, settings: object | str | None = None) -> Path:
    app = tmp_path / "app"
    shutil.copytree(SAMPLE, app, ignore=shutil.ignore_patterns("__pycache__", ".durable"))
    if settings is not None:
        text = settings if isinstance(settings, str) else json.dumps(settings)
        (app / "local.settings.json").write_text(text)
    return app


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_directory_without_function_app_is_refused_in_one_line(tmp_path: Path) -> None:
    line = one_line(run_start("--app-dir", str(tmp_path)))

    assert f"{tmp_path / 'function_app.py'} not found" in line


def test_a_local_settings_file_that_is_not_json_is_named(tmp_path: Path) -> None:
    app = app_copy(tmp_path, "{not json")

    line = one_line(run_start("--app-dir", str(app)))

    assert str(app / "local.settings.json") in line and "not valid JSON" in line


def test_a_bad_local_http_port_names_the_field(tmp_path: Path) -> None:
    app = app_copy(tmp_path, {"Host": {"LocalHttpPort": "seventy"}})

    line = one_line(
        subprocess.run(
            [sys.executable, "-m", "durable_host", "start", "--app-dir", str(app)],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
        )
    )

    assert "Host.LocalHttpPort" in line and "local.settings.json" in line


def test_an_unknown_flag_is_named(tmp_path: Path) -> None:
    line = one_line(run_start("--app-dir", str(tmp_path), "--no-such-flag"))

    assert "--no-such-flag" in line


ARCHIVE = """

@app.route(route="archive", methods=["POST"])
@app.cosmos_db_output(arg_name="out", database_name="db", container_name="c", connection="Cosmos")
def archive(req: func.HttpRequest, out) -> str:
    out.set(func.Document.from_json(req.get_body()))
    return "stored"
"""


def test_a_served_function_with_a_binding_the_host_does_not_run_is_named(tmp_path: Path) -> None:
    app = app_copy(tmp_path)
    with (app / "function_app.py").open("a") as source:
        source.write(ARCHIVE)

    line = one_line(run_start("--app-dir", str(app), "--store", f"sqlite:{tmp_path / 'h.db'}"))

    assert "function 'archive'" in line and "cosmosDB (out binding 'out')" in line


def test_functions_naming_an_unknown_function_is_refused(tmp_path: Path) -> None:
    line = one_line(run_start("--app-dir", str(SAMPLE), "--functions", "greet", "nope"))

    assert "--functions names nope" in line


def test_start_lists_functions_and_honours_the_host_section(tmp_path: Path) -> None:
    port = free_port()
    settings = {
        "IsEncrypted": False,
        "Values": {"FUNCTIONS_WORKER_RUNTIME": "python"},
        "Host": {"LocalHttpPort": port, "CORS": "http://ui.example", "CORSCredentials": True},
    }
    app = app_copy(tmp_path, settings)
    log = tmp_path / "host.log"
    with log.open("w") as err:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "durable_host",
                "start",
                "--app-dir",
                str(app),
                "--store",
                f"sqlite:{tmp_path / 'h.db'}",
                "--grace",
                "1",
                "--functions",
                "greet,start",
                "pair",
                "shout",
            ],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            cwd=ROOT,
        )
    try:
        assert process.stdout is not None
        first = process.stdout.readline()
        assert first.strip() == f"durable host listening on http://127.0.0.1:{port}"
        base = f"http://127.0.0.1:{port}"
        preflight = urllib.request.Request(
            f"{base}/api/greet/ann",
            method="OPTIONS",
            headers={"Origin": "http://ui.example", "Access-Control-Request-Method": "GET"},
        )
        with urllib.request.urlopen(preflight, timeout=30) as resp:
            assert resp.status == 204
            assert resp.headers["Access-Control-Allow-Origin"] == "http://ui.example"
            assert resp.headers["Access-Control-Allow-Credentials"] == "true"
        call = urllib.request.Request(
            f"{base}/api/greet/ann", headers={"Origin": "http://ui.example"}
        )
        with urllib.request.urlopen(call, timeout=30) as resp:
            assert resp.read() == b"hello ann"
            assert resp.headers["Access-Control-Allow-Origin"] == "http://ui.example"
        other = urllib.request.Request(
            f"{base}/api/greet/ann", headers={"Origin": "http://evil.example"}
        )
        with urllib.request.urlopen(other, timeout=30) as resp:
            assert "Access-Control-Allow-Origin" not in resp.headers
    finally:
        process.terminate()
        process.wait(30)
    text = log.read_text()
    assert f"greet: [GET] {base}/api/greet/{{name}}" in text
    assert f"start: [POST] {base}/api/start" in text
    assert (
        f"pair: orchestrationTrigger (start: [POST] {base}/runtime/webhooks/durabletask/orchestrators/pair)"
        in text
    )
    assert "shout: activityTrigger" in text
    assert "drain" not in text  # left out with --functions


def test_functions_naming_a_trigger_the_host_does_not_run_is_refused(tmp_path: Path) -> None:
    line = one_line(run_start("--app-dir", str(SAMPLE), "--functions", "greet", "drain"))

    assert "'drain'" in line and "eventHubTrigger" in line


def test_a_trigger_the_host_does_not_run_is_listed_and_cors_takes_any_origin(
    tmp_path: Path,
) -> None:
    host = HostProcess(SAMPLE, f"sqlite:{tmp_path / 'h.db'}", args=["--cors", "*"]).start()
    try:
        resp = host.get("/api/greet/bo", headers={"Origin": "http://any.example"})
        assert resp.headers["Access-Control-Allow-Origin"] == "*"
    finally:
        host.kill()
    assert host.log_path is not None
    text = host.log_path.read_text()
    assert "not run: function 'drain': trigger eventHubTrigger is not supported" in text


def test_an_unreadable_engine_setting_is_refused_before_the_store_is_touched(
    tmp_path: Path,
) -> None:
    app = app_copy(tmp_path, {"IsEncrypted": False, "Values": {"DURABLE_HOST_SESSIONS": "maybe"}})
    store = tmp_path / "hub.db"

    line = one_line(run_start("--app-dir", str(app), "--store", f"sqlite:///{store}"))

    assert "DURABLE_HOST_SESSIONS='maybe' is not a boolean" in line
    assert not store.exists()
    assert not list(app.glob(".durable/*"))


def test_an_engine_count_that_is_not_a_number_is_refused(tmp_path: Path) -> None:
    app = app_copy(tmp_path, {"Values": {"DURABLE_HOST_SESSION_VERIFY": "every tenth"}})

    line = one_line(run_start("--app-dir", str(app)))

    assert "DURABLE_HOST_SESSION_VERIFY='every tenth' is not a whole number" in line


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("DURABLE_HOST_LEASE_SECONDS", "5"),  # Azure blob leases start at 15 s
        ("DURABLE_HOST_LEASE_SECONDS", "fifteen"),
        ("DURABLE_HOST_SILENCE_SECONDS", "0"),
        ("DURABLE_HOST_SILENCE_SECONDS", "2.5"),
    ],
)
def test_a_bad_lease_or_silence_on_azure_is_refused_by_name(
    tmp_path: Path, setting: str, value: str
) -> None:
    values = {"AzureWebJobsStorage": "UseDevelopmentStorage=true", setting: value}
    app = app_copy(tmp_path, {"Values": values})

    line = one_line(run_start("--app-dir", str(app), "--store", "azure"))

    assert f"{setting}={value!r} is not a whole number of seconds from" in line
    assert not (app / ".durable" / "azurite").exists()  # refused before Azurite was started


def test_a_storage_connection_host_json_names_but_nobody_set_is_refused_by_name(
    tmp_path: Path,
) -> None:
    app = app_copy(tmp_path, {"Values": {"AzureWebJobsStorage": "UseDevelopmentStorage=true"}})
    host_json = json.loads((app / "host.json").read_text())
    durable = host_json.setdefault("extensions", {}).setdefault("durableTask", {})
    durable["storageProvider"] = {"connectionName": "OrdersStorage"}
    (app / "host.json").write_text(json.dumps(host_json))

    line = one_line(run_start("--app-dir", str(app), "--store", "azure"))

    assert "needs the OrdersStorage setting" in line and "connectionName" in line
    assert not (app / ".durable" / "azurite").exists()  # refused before Azurite was started
