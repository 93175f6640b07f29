"""What the reliability campaigns share: the ledger app, its hosts, and the oracle; the
kernel app's hosts and the mail service (shared with ``tests/app``); ``long_run``.

``DURABLE_RELIABILITY_LONG=1`` runs the long versions (``docs/reliability.md``); without it
each campaign runs a quick subset that is part of the normal test command.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest

from tests.app.conftest import fresh_kernel_host, kernel_host, mailbox  # noqa: F401
from tests.harness import WEBHOOK, HostProcess, wait_for

APP = Path(__file__).resolve().parent / "app"
LONG = os.environ.get("DURABLE_RELIABILITY_LONG", "") not in ("", "0")


@pytest.fixture
def long_run() -> bool:
    return LONG


def expected_output(key: str, steps: int) -> list[str]:
    """What ``ledger_chain`` must return, computed here, not by the system under test."""
    return [f"{key}:{i}:{i * i}" for i in range(steps)]


def ledger_runs(ledger: Path) -> Counter[str]:
    """How often each step ran, by the ledger (``run <key>:<i>`` lines)."""
    if not ledger.exists():
        return Counter()
    lines = ledger.read_text().splitlines()
    return Counter(line.split(" ", 2)[2] for line in lines if line.split(" ")[1] == "run")


def submit(host: HostProcess, name: str, instance_id: str, body: object) -> None:
    """Start ``instance_id`` until the host accepts it: a 503 (storage failed) is retried as
    a client would; a 409 means an earlier try was accepted."""

    def accepted() -> bool:
        response = host.post(f"{WEBHOOK}/orchestrators/{name}/{instance_id}", body)
        assert response.status in (202, 409, 503), (response.status, response.body)
        return response.status != 503

    wait_for(accepted, 60, f"{instance_id} to be accepted", interval=0.2)


def tally(host: HostProcess, key: str = "all") -> int:
    """The ``tally`` entity's count (reads that meet a store fault are repeated)."""

    def read() -> list[int] | None:
        response = host.get(f"{WEBHOOK}/entities/tally/{key}")
        assert response.status in (200, 503), (response.status, response.body)
        return [response.json()] if response.status == 200 else None

    return int(wait_for(read, 30, f"the tally of {key}")[0])


def check_chain(host: HostProcess, key: str, steps: int) -> None:
    """``key``'s orchestration completed with the expected output and a history with one
    start, one completion per step and one end: nothing lost, nothing twice."""
    status = host.wait_for_status(key, timeout=120)
    assert status["runtimeStatus"] == "Completed", (key, status.get("output"))
    assert status["output"] == expected_output(key, steps)
    # A read may meet an injected store fault (503) too: read until one answers.
    view = wait_for(lambda: host.status(key, "?showHistory=true"), 30, f"{key}'s history")
    kinds = Counter(event["EventType"] for event in view["historyEvents"])
    assert kinds["ExecutionStarted"] == kinds["ExecutionCompleted"] == 1, kinds
    assert kinds["TaskCompleted"] == steps and kinds["TaskFailed"] == 0, kinds
