"""The suite's temp-folder check (tests/temp_check.py), run on a small generated suite in a
pytest process of its own whose system temp folder is a fresh directory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.harness import ROOT

SUITE = """
import os
import subprocess
import sys
import tempfile
from pathlib import Path


def test_tempfile_in_the_test_and_in_a_child_process():
    handle, name = tempfile.mkstemp(suffix=".log")
    os.close(handle)
    code = "import tempfile; tempfile.mkdtemp(prefix='child-')"
    subprocess.run([sys.executable, "-c", code], check=True)
    # Under pytest's own folder (pytest-of-<user>), not beside it.
    assert Path(name).relative_to(os.environ["SYSTEM_TEMP"]).parts[0].startswith("pytest-of-")


def test_maybe_leak():
    if os.environ.get("LEAK"):
        Path(os.environ["SYSTEM_TEMP"], "durable-host-leak.log").write_text("left behind")
"""


def run(tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    system = tmp_path / "system"
    system.mkdir(exist_ok=True)
    (tmp_path / "test_generated.py").write_text(SUITE)
    clean = {k: v for k, v in os.environ.items() if k not in ("DURABLE_TEST_TEMP_CHECK", "LEAK")}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "tests.temp_check", "-p", "no:cacheprovider"]
        + ["test_generated.py"],
        cwd=tmp_path,
        env={**clean, "TMPDIR": str(system), "SYSTEM_TEMP": str(system), "PYTHONPATH": str(ROOT)}
        | env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return result, system


def test_files_made_through_tempfile_stay_under_pytests_folder(tmp_path: Path) -> None:
    result, system = run(tmp_path)

    assert result.returncode == 0, result.stdout + result.stderr
    # Only pytest's own folder, and nothing left in the processes' own temp dirs.
    assert [p.name.startswith("pytest-of-") for p in system.iterdir()] == [True]
    assert list(system.rglob("child-*")) == [] and list(system.rglob("*.log")) == []


def test_a_file_left_in_the_system_temp_folder_fails_the_run_naming_it(tmp_path: Path) -> None:
    result, _ = run(tmp_path, LEAK="1")

    assert result.returncode == 1, result.stdout + result.stderr
    assert "1 new entries in" in result.stdout and "durable-host-leak.log" in result.stdout
    assert "2 passed" in result.stdout


def test_the_check_can_be_turned_off_for_two_suites_sharing_the_folder(tmp_path: Path) -> None:
    result, system = run(tmp_path, LEAK="1", DURABLE_TEST_TEMP_CHECK="0")

    assert result.returncode == 0, result.stdout + result.stderr
    assert (system / "durable-host-leak.log").exists()
