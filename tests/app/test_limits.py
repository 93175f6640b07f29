"""Declared limits end to end: the ``limiter`` entity and ``orchestrators.limits`` on a real
host. Twenty concurrent requests on one key with limit 1 run one at a time, each exactly
once; a holder that died mid-run gives its slot back when its lease ends. And the same
through a tool's declaration: twenty sessions appending to the ledger at once (the catalogue
declares ``append_ledger`` one at a time) append one at a time, each once, in ticket order.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from kernel.common import ids
from kernel.turn import tools
from tests.app.test_sessions_api import final, submit
from tests.harness import APPS, HostProcess, store_spec_for, store_specs

SINGLE = {"key": "service:{service}", "limit": 1, "lease_s": 60}


@pytest.fixture(params=store_specs())
def host(request: pytest.FixtureRequest, tmp_path: Path):
    process = HostProcess(
        APPS / "limits",
        store_spec_for(str(request.param), tmp_path),
        env={"LIMITS_APP_MARKS": str(tmp_path / "marks.txt")},
    )
    process.start()
    yield process
    process.kill()


def test_twenty_concurrent_requests_on_one_key_run_one_at_a_time_each_once(
    host: HostProcess, tmp_path: Path
) -> None:
    def start(n: int) -> str:
        job = {"n": n, "service": "mail", "concurrency": SINGLE}
        return host.start_orchestration("limited", job, f"req-{n:02d}")

    with ThreadPoolExecutor(20) as pool:
        ids = list(pool.map(start, range(20)))
    for n, instance_id in enumerate(ids):
        assert host.wait_for_status(instance_id, timeout=60)["output"] == n
    lines = (tmp_path / "marks.txt").read_text().split()
    marks = list(zip(lines[0::2], lines[1::2], strict=True))
    pairs = list(zip(marks[0::2], marks[1::2], strict=True))
    assert len(pairs) == 20
    for (start_word, started), (end_word, ended) in pairs:
        assert (start_word, end_word) == ("start", "end") and started == ended  # no overlap
    assert sorted(int(started) for (_, started), _ in pairs) == list(range(20))  # each once


def test_a_holder_that_died_gives_its_slot_back_when_its_lease_ends(host: HostProcess) -> None:
    short = {**SINGLE, "lease_s": 2}
    grabbed = host.start_orchestration("grab", {"service": "x", "concurrency": short}, "grabber")
    assert host.wait_for_status(grabbed)["output"] == "granted"  # and never released
    waiter = host.start_orchestration(
        "limited", {"n": 7, "service": "x", "concurrency": short}, "waiter"
    )
    assert host.wait_for_status(waiter, timeout=60)["output"] == 7


def execute_window(host: HostProcess, task_id: str) -> tuple[str, str]:
    """(scheduled, completed) times of the tool task's ``execute_tool`` activity."""
    status = host.status(task_id, "?showHistory=true") or {}
    runs = [e for e in status["historyEvents"] if e.get("FunctionName") == "execute_tool"]
    assert len(runs) == 1, runs  # one try, once
    return runs[0]["ScheduledTime"], runs[0]["Timestamp"]


def test_twenty_sessions_append_to_the_ledger_one_at_a_time_each_once_in_order(
    fresh_kernel_host: Callable[..., HostProcess],
) -> None:
    assert tools.TOOLS["append_ledger"].concurrency == {
        "key": "tool-ledger",
        "limit": 1,
        "lease_s": 120,
    }
    host = fresh_kernel_host({"AGENT_MAX_CONCURRENT_MODEL_CALLS": "8"}).start()

    def start(n: int) -> tuple[str, str]:
        session = f"ledger-{n:02d}"
        resp = submit(host, session, "r1", f"ledger: entry {n:02d}")
        assert resp.status == 202, resp.body
        return session, resp.json()["submissionId"]

    with ThreadPoolExecutor(20) as pool:
        started = list(pool.map(start, range(20)))
    granted: list[dict[str, Any]] = []
    for session, sub_id in started:
        assert final(host, session, sub_id, timeout=180)["status"] == "completed"
        task_id = ids.tool_task_id(sub_id, 1, 0)
        status = host.wait_for_status(task_id, timeout=30)
        assert status["output"]["ok"], status
        limit = status["customStatus"]["limit"]
        assert limit["key"] == "tool-ledger"
        granted.append({"session": session, "task": task_id, "ticket": limit["ticket"]})
    granted.sort(key=lambda g: g["ticket"])
    assert [g["ticket"] for g in granted] == list(range(1, 21))  # every request, once
    # Each once, in the order the limiter took the requests.
    lines = Path(host.env["AGENT_TOOL_LEDGER_FILE"]).read_text().split("\n")
    expected = [f"entry {g['session'].removeprefix('ledger-')}" for g in granted]
    assert [line for line in lines if line] == expected
    # One at a time: each run starts after the one before it ended.
    windows = [execute_window(host, g["task"]) for g in granted]
    for (_, ended), (started_next, _) in itertools.pairwise(windows):
        assert started_next >= ended
