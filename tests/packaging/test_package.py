"""The host as an installable package: a wheel holding ``durable_host`` (its dashboard files
included) and the two packages it shares with apps (``functions_schedules``,
``functions_connections``), nothing of the app, with the ``durable-host`` command and the
pytest plugin's entry point.

The full install - a clean virtual environment, the wheel and its dependencies from the
package index, ``durable-host`` serving an app from another directory, and the plugin's
example run by that environment's pytest (a kill and a restart included) - takes minutes,
so it runs only with ``DURABLE_TEST_PACKAGING=1``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.request
import venv
import zipfile
from pathlib import Path

import pytest

from tests.harness import ROOT

PACKAGED = (
    "pyproject.toml",
    "requirements-host.txt",
    "docs/host.md",
    "durable_host",
    "functions_schedules",
    "functions_connections",
)


def build_wheel(tmp_path: Path) -> Path:
    """Build from a copy holding only what the package needs, so the build leaves nothing in
    the work tree and cannot pick up the app by accident."""
    source = tmp_path / "source"
    for name in PACKAGED:
        target = source / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, target, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(ROOT / name, target)
    dist = tmp_path / "dist"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--quiet",
            "-w",
            str(dist),
            str(source),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    (wheel,) = dist.glob("durable_host-*.whl")
    return wheel


def test_the_wheel_holds_the_host_alone_with_its_command_and_plugin(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path)

    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        info = next(n for n in names if n.endswith(".dist-info/METADATA"))
        metadata = archive.read(info).decode()
        entry_points = archive.read(info.replace("METADATA", "entry_points.txt")).decode()

    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    # The host and the two packages it shares with apps; nothing of this repository's app.
    assert tops == {"durable_host", "functions_schedules", "functions_connections"}
    assert {
        "functions_connections/__init__.py",
        "functions_connections/settings.py",
        "durable_host/cli.py",
        "durable_host/pytest_plugin.py",
        "durable_host/testing.py",
        "durable_host/store/azure/store.py",
        "durable_host/dashboard/static/index.html",
        "durable_host/dashboard/static/dashboard.js",
        "durable_host/dashboard/static/dashboard.css",
        "functions_schedules/__init__.py",
    } <= set(names)
    assert "durable-host = durable_host.cli:main" in entry_points
    assert "[pytest11]" in entry_points and "durable_host.pytest_plugin" in entry_points
    host_pins = [
        line.strip()
        for line in (ROOT / "requirements-host.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert [f"Requires-Dist: {pin}" in metadata for pin in host_pins] == [True] * len(host_pins)
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    assert len(requires) == len(host_pins)  # nothing of the app (openai, pydantic)
    assert "Requires-Python: >=3.11" in metadata


@pytest.mark.skipif(
    os.environ.get("DURABLE_TEST_PACKAGING") != "1",
    reason="installs the host into a fresh virtual environment (minutes): DURABLE_TEST_PACKAGING=1",
)
def test_pip_install_gives_a_working_command_and_pytest_plugin(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path)
    env_dir = tmp_path / "env"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", str(wheel), "pytest==9.0.3"],
        check=True,
        timeout=900,
    )
    # The sample app lives in a directory of its own, away from this repository.
    project = tmp_path / "project"
    shutil.copytree(
        ROOT / "examples" / "plugin_test",
        project,
        ignore=shutil.ignore_patterns("__pycache__", ".durable"),
    )
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}

    command = subprocess.Popen(
        [
            str(env_dir / "bin" / "durable-host"),
            "start",
            "--app-dir",
            str(project / "app"),
            "--port",
            "0",
            "--store",
            f"sqlite:{tmp_path / 'cli.db'}",
        ],
        cwd=tmp_path,
        env=clean,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert command.stdout is not None
        line = command.stdout.readline()
        assert "listening on" in line, line
        base = line.strip().rsplit(" ", 1)[-1]
        request = urllib.request.Request(
            f"{base}/runtime/webhooks/durabletask/orchestrators/process_order",
            data=json.dumps({"item": "pen", "qty": 1}).encode(),
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as resp:
            assert resp.status == 202
        with urllib.request.urlopen(f"{base}/admin/dashboard", timeout=30) as resp:
            assert b"drawTimeline" in resp.read()
    finally:
        command.kill()
        command.wait(10)

    result = subprocess.run(
        [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", str(project)],
        cwd=project,
        env=clean,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "1 passed" in result.stdout
