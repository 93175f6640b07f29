"""The host's pytest plugin as a user meets it: the documented example, copied outside the
repository, run by pytest with nothing but the plugin (a crash and a restart included)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from durable_host.testing import HostProcess
from tests.harness import ROOT


def test_the_documented_example_passes_outside_the_repository(tmp_path: Path) -> None:
    project = tmp_path / "project"
    shutil.copytree(
        ROOT / "examples" / "plugin_test",
        project,
        ignore=shutil.ignore_patterns("__pycache__", ".durable"),
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # as if the host were installed

    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "durable_host.pytest_plugin",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(project),
            str(project),
        ],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )

    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "1 passed" in result.stdout


def test_the_fixture_handle_drives_the_basic_app(durable_host_factory) -> None:
    host = durable_host_factory(ROOT / "tests" / "apps" / "basic")

    waiting = host.start_new("approval", instance_id="plugin-approval")
    host.wait_for_status(waiting, "Running")
    host.terminate(waiting, "not needed")
    assert host.wait_for_status(waiting)["runtimeStatus"] == "Terminated"

    done = host.start_new("hello_sequence")
    assert host.wait_for_completion(done)["output"] == [
        "Hello Tokyo!",
        "Hello Seattle!",
        "Hello London!",
    ]


def test_the_fixture_keeps_every_log_in_the_test_own_folder(
    durable_host_factory, tmp_path: Path
) -> None:
    host = durable_host_factory(ROOT / "tests" / "apps" / "basic")

    assert host.log_path is not None and host.log_path.parent == tmp_path
    deadline = time.monotonic() + 20
    while "durable host serving" not in host.log_path.read_text() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "durable host serving" in host.log_path.read_text()


def test_a_host_without_a_sqlite_file_never_logs_into_its_app_folder(tmp_path: Path) -> None:
    process = HostProcess(tmp_path / "app", "azure")

    path = process.default_log_path()

    assert path.parent == Path(tempfile.gettempdir())  # the run's own under this suite
    assert not path.is_relative_to(tmp_path / "app")
    assert process.env["DURABLE_HOST_HUB"] in path.name
