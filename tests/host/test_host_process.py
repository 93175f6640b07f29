"""The host as a process: CLI, settings, one host per store file, clean shutdown.

Where a test needs only a running host, it takes it from the host's own pytest plugin
(``durable_host_factory``), as an app's tests would."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from tests.harness import APPS, ROOT, WEBHOOK, HostProcess


def copy_app(tmp_path: Path, settings: dict | None = None) -> Path:
    app = tmp_path / "app"
    shutil.copytree(APPS / "basic", app)
    if settings is not None:
        (app / "local.settings.json").write_text(
            json.dumps({"IsEncrypted": False, "Values": settings})
        )
    return app


def test_default_store_is_sqlite_under_the_app_durable_folder(tmp_path):
    app = copy_app(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "durable_host", "start", "--app-dir", str(app), "--port", "0"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert "listening on" in proc.stdout.readline()
        assert (app / ".durable" / "BasicHub.db").exists()
    finally:
        proc.terminate()
        proc.wait(20)


def test_second_host_on_the_same_store_refuses_with_a_clear_message(tmp_path):
    first = HostProcess(APPS / "basic", f"sqlite:{tmp_path / 'one.db'}").start()
    try:
        second = subprocess.run(
            [
                sys.executable,
                "-m",
                "durable_host",
                "start",
                "--app-dir",
                str(APPS / "basic"),
                "--port",
                "0",
                "--store",
                f"sqlite:{tmp_path / 'one.db'}",
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert second.returncode == 2
        assert "Another durable host is already using" in second.stderr
    finally:
        first.kill()


def test_sigterm_stops_cleanly_and_work_resumes_after_restart(durable_host_factory):
    host = durable_host_factory(APPS / "basic")
    instance = host.start_new("approval")
    host.wait_for_status(instance, "Running")

    assert host.stop() == 0
    host.restart()
    host.raise_event(instance, "approve", "yes")

    assert host.wait_for_completion(instance)["output"] == {"approved": "yes"}


def test_local_settings_fill_the_environment_without_overriding_it(tmp_path, durable_host_factory):
    app = copy_app(tmp_path, {"AzureWebJobs.fail.Disabled": "true", "BASIC_APP_MARKS": "/not/used"})
    marks = tmp_path / "marks.txt"
    host = durable_host_factory(app, env={"BASIC_APP_MARKS": str(marks)})

    hello = host.wait_for_status(host.start_new("hello_sequence"))
    failing = host.wait_for_status(host.start_new("catches_failure"))

    assert hello["runtimeStatus"] == "Completed"
    assert "say_hello:Tokyo" in marks.read_text()  # the environment won over local.settings.json
    assert failing["output"] == "Activity function 'fail' failed: The function 'fail' is disabled. "


def test_bad_app_directory_exits_with_a_message(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "durable_host", "start", "--app-dir", str(tmp_path), "--port", "0"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert result.returncode == 2 and "function_app.py not found" in result.stderr


SETTING_ROUTE = """

@app.route(route="setting/{name}", methods=["GET"])
def setting(req: func.HttpRequest) -> func.HttpResponse:
    return func.HttpResponse(os.environ.get(req.route_params["name"], "<unset>"))
"""


def test_host_json_setting_references_resolve_and_the_app_sees_its_script_root(tmp_path):
    app = copy_app(tmp_path, {"TASKHUB_NAME": "ResolvedHub"})
    (app / "host.json").write_text(
        json.dumps({"version": "2.0", "extensions": {"durableTask": {"hubName": "%TASKHUB_NAME%"}}})
    )
    (app / "function_app.py").write_text((app / "function_app.py").read_text() + SETTING_ROUTE)
    host = HostProcess(
        app, f"sqlite:{tmp_path / 'h.db'}", env={"AzureWebJobsScriptRoot": ""}
    ).start()
    try:
        started = host.post(f"{WEBHOOK}/orchestrators/hello_sequence")
        root = host.get("/api/setting/AzureWebJobsScriptRoot")
    finally:
        host.kill()

    assert started.status == 202 and "taskHub=ResolvedHub&" in started.json()["statusQueryGetUri"]
    assert root.body.decode() == str(app.resolve())


def test_a_host_json_reference_to_a_missing_setting_stops_the_start_naming_it(tmp_path):
    app = copy_app(tmp_path)
    (app / "host.json").write_text(
        json.dumps({"extensions": {"durableTask": {"hubName": "%NO_SUCH_HUB%"}}})
    )

    result = subprocess.run(
        [sys.executable, "-m", "durable_host", "start", "--app-dir", str(app), "--port", "0"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert result.returncode == 2 and "%NO_SUCH_HUB%" in result.stderr, result.stderr
