"""The host as a process: CLI, settings, one host per store file, clean shutdown.

Where a test needs only a running host, it takes it from the host's own pytest plugin
(``durable_host_factory``), as an app's tests would."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from tests.harness import APPS, ROOT, HostProcess


def copy_app(tmp_path: Path, settings: dict | None = None) -> Path:
    app = tmp_path / "app"
    shutil.copytree(APPS / "basic", app)
    if settings is not None:
        (app / "local.settings.json").write_text(json.dumps({"IsEncrypted": False, "Values": settings}))
    return app


def test_default_store_is_sqlite_under_the_app_durable_folder(tmp_path):
    app = copy_app(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "durable_host", "start", "--app-dir", str(app), "--port", "0"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
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
            [sys.executable, "-m", "durable_host", "start", "--app-dir", str(APPS / "basic"),
             "--port", "0", "--store", f"sqlite:{tmp_path / 'one.db'}"],
            cwd=ROOT, capture_output=True, text=True, timeout=60,
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
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )

    assert result.returncode == 2 and "function_app.py not found" in result.stderr
