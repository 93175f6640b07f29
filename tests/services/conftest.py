"""Fixtures that run the mailbox as a real process on loopback."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from services.mailbox.testing import start_mailbox, stop_mailbox


@dataclass
class RunningMailbox:
    process: subprocess.Popen[bytes]
    url: str
    db: Path


@pytest.fixture
def mailbox(tmp_path: Path) -> Iterator[RunningMailbox]:
    """A fresh mailbox on its own database file, stopped with SIGTERM at the end."""
    db = tmp_path / "mailbox.db"
    process, url = start_mailbox(db)
    running = RunningMailbox(process, url, db)
    yield running
    stop_mailbox(running.process)


@pytest.fixture(scope="module")
def shared_mailbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningMailbox]:
    """One mailbox for tests that must leave it unchanged (bad input), to save start-up time."""
    db = tmp_path_factory.mktemp("mailbox") / "mailbox.db"
    process, url = start_mailbox(db)
    yield RunningMailbox(process, url, db)
    stop_mailbox(process)
