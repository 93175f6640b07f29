"""No test leaves a file outside its temp dirs: pytest hooks (tests/conftest.py takes them).

Each pytest process (the controller and every xdist worker) gets a ``TMPDIR`` of its own
under pytest's basetemp, so ``tempfile`` in tests and in every process they start (hosts,
Azurite, Chromium and its profile helpers) writes there; it is removed when the session
passes and kept, with the logs in it, when it fails. The controller lists the system temp
folder before and after the run and fails the run naming what is new. pytest's own folder
there (``pytest-of-<user>``) is where everything is meant to go, so it is not counted.
``DURABLE_TEST_TEMP_CHECK=0`` skips the check, for two suites sharing one temp folder
(docs/testing.md).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

TEMP_CHECK = "DURABLE_TEST_TEMP_CHECK"
_SYSTEM_TEMP = pytest.StashKey[tuple[Path, frozenset[str]]]()
_OWN_TEMP = pytest.StashKey[Path]()
_LEFT_BEHIND = pytest.StashKey[list[str]]()


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


@pytest.hookimpl(trylast=True)  # after the tmp_path plugin has set up its factory
def pytest_configure(config: pytest.Config) -> None:
    if not _is_worker(config):
        system = Path(tempfile.gettempdir())
        config.stash[_SYSTEM_TEMP] = (system, frozenset(os.listdir(system)))
    own = config._tmp_path_factory.getbasetemp() / "tmp"
    own.mkdir(exist_ok=True)
    os.environ["TMPDIR"] = str(own)  # inherited by every process the tests start
    tempfile.tempdir = None  # tempfile keeps the folder it found first
    config.stash[_OWN_TEMP] = own


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    own = config.stash.get(_OWN_TEMP, None)
    if own is not None and exitstatus == 0:
        shutil.rmtree(own, ignore_errors=True)  # a failed run keeps its logs
    if _is_worker(config) or _SYSTEM_TEMP not in config.stash:
        return
    if os.environ.get(TEMP_CHECK, "1") == "0":
        return
    system, before = config.stash[_SYSTEM_TEMP]
    basetemp = config._tmp_path_factory.getbasetemp()
    # pytest's own folder (pytest-of-<user>) is where everything is meant to go.
    ours = {basetemp.relative_to(system).parts[0]} if basetemp.is_relative_to(system) else set()
    left = sorted(set(os.listdir(system)) - before - ours)
    if left:
        config.stash[_LEFT_BEHIND] = left
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config
) -> None:
    left = config.stash.get(_LEFT_BEHIND, None)
    if not left:
        return
    system = config.stash[_SYSTEM_TEMP][0]
    terminalreporter.write_sep("=", f"{len(left)} new entries in {system}", red=True)
    for name in left[:50]:
        terminalreporter.write_line(f"  {name}")
    terminalreporter.write_line(
        "Every file a test writes belongs under its tmp_path (or a fixture's own temp dir that"
        f" it removes); {TEMP_CHECK}=0 skips this check when another suite shares the folder."
    )
