"""Declared limits end to end: the ``limiter`` entity and ``orchestrators.limits`` on a real
host. Twenty concurrent requests on one key with limit 1 run one at a time, each exactly
once; a holder that died mid-run gives its slot back when its lease ends."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

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
    assert host.wait_for_status(waiter, timeout=30)["output"] == 7
