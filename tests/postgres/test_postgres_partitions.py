"""Several hosts on one PostgreSQL hub: partitions spread, taken over, fenced.

Stores in one process show the spread and the fence below the host; real host processes
show a SIGKILLed host's partitions taken within the lease with nothing lost, and a
SIGSTOPped host past its lease fenced (nothing it had in flight lands twice, no history
forks). Waits are bounded; nothing asserts on durations.
"""

from __future__ import annotations

import asyncio
import re
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from durable_host.store.base import UnitLostError
from durable_host.store.postgres import PostgresStore, from_spec
from tests.harness import APPS, HostProcess, wait_for
from tests.store.test_azure_fencing import assert_no_fork, start_slow
from tests.store.test_azure_partitions import first_episode

START = {"kind": "start", "event": {"EventType": 0, "Name": "o"}}
LEASE = 5  # the shortest the setting allows: takeovers within a test's patience


def store_for(url: str, hub: str, **kw: Any) -> PostgresStore:
    env = {"DURABLE_HOST_LEASE_SECONDS": str(LEASE)}
    return PostgresStore(from_spec(f"postgres:{url}", hub, env=env), **kw)


async def insert_activity(store: PostgresStore) -> int:
    """A work item of instance ``i`` nobody claims yet, as a commit writes one."""
    conn = await store.db.connect()
    try:
        cur = await conn.execute(
            "INSERT INTO activities (instance_id, execution_id, task_id, name, input)"
            " VALUES ('i', 'e', 0, 'act', NULL) RETURNING id"
        )
        row = await cur.fetchone()
        assert row is not None
        return int(row[0])
    finally:
        await conn.close()


def test_three_stores_spread_the_partitions_and_a_clean_leave_hands_them_over(
    postgres_url: str,
) -> None:
    hub = "S" + uuid.uuid4().hex[:10]

    async def main() -> None:
        stores = [store_for(postgres_url, hub, partition_count=6) for _ in range(3)]
        for store in stores:
            await store.open()
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:  # rounds every LEASE / 3 seconds
                held = [s.partitions.held() for s in stores if s.partitions]
                if [len(h) for h in held] == [2, 2, 2]:
                    break
                await asyncio.sleep(0.2)
            held = [s.partitions.held() for s in stores if s.partitions]
            assert [len(h) for h in held] == [2, 2, 2], held
            assert set().union(*held) == set(range(6))
            backlog = await stores[0].hub_backlog("2026-01-01T00:00:00Z")
            assert sorted(len(h["partitions"]) for h in backlog["hosts"]) == [2, 2, 2]

            await stores[2].close()  # a clean stop: its partitions are free at once
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                held = [s.partitions.held() for s in stores[:2] if s.partitions]
                if set().union(*held) == set(range(6)):
                    break
                await asyncio.sleep(0.2)
            assert sorted(len(h) for h in held) == [3, 3]
        finally:
            for store in stores[:2]:
                await store.close()

    asyncio.run(main())


def test_an_activity_claimed_by_a_live_host_is_not_claimed_again(postgres_url: str) -> None:
    hub = "C" + uuid.uuid4().hex[:10]

    async def main() -> None:
        a = store_for(postgres_url, hub, partition_count=1)
        b = store_for(postgres_url, hub, partition_count=1)
        await a.open()
        await b.open()
        try:
            work_id = await insert_activity(a)
            assert await a.mark_activity_dequeued(work_id) == 1
            assert await b.mark_activity_dequeued(work_id) == 0  # a is live: it runs there
            assert [w.work_id for w in await b.pending_activities()] == []
            await a.release_activity(work_id)  # a graceful stop gives it back
            assert await b.mark_activity_dequeued(work_id) == 1
        finally:
            await b.close()
            await a.close()

    asyncio.run(main())


def test_a_silent_host_is_evicted_before_its_lease_lapses_and_fenced(
    postgres_url: str, caplog
) -> None:
    """``a`` hangs (no heartbeat, no renewal; its lease still runs): ``b`` sees the heartbeat
    unchanged for the silence, frees and takes the partition, and takes over ``a``'s
    activity claim; ``a``'s commit afterwards finds its epoch gone and writes nothing."""
    hub = "E" + uuid.uuid4().hex[:10]
    env = {"DURABLE_HOST_LEASE_SECONDS": "60", "DURABLE_HOST_SILENCE_SECONDS": "1"}

    async def main() -> None:
        a, b = (
            PostgresStore(from_spec(f"postgres:{postgres_url}", hub, env=env), partition_count=1)
            for _ in range(2)
        )
        await a.open()
        await b.open()
        try:
            await a.send("i", START, "t")
            messages = await a.fetch_messages("i", "t")
            work_id = await insert_activity(a)
            assert await a.mark_activity_dequeued(work_id) == 1
            assert a.membership is not None
            for task in (a.membership._task, a.membership._beats, a.membership._watch):
                assert task is not None
                task.cancel()  # hung: from now on its heartbeat does not change
            assert b.partitions is not None
            deadline = time.monotonic() + 30
            while b.partitions.held() != {0} and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            assert b.partitions.held() == {0}, "b never evicted the silent host"
            assert "partition 0 evicted from" in caplog.text
            assert await b.mark_activity_dequeued(work_id) == 2  # a's claim lapsed: run 2
            late = first_episode(messages, [{"EventType": 0}])
            with pytest.raises(UnitLostError):
                await a.commit_episode("i", late, "t")
            assert await b.get_history("i") == []  # nothing of a's landed
        finally:
            await b.close()
            await a.close()

    caplog.set_level("INFO")
    asyncio.run(main())


# --- host processes ------------------------------------------------------------------------


class LoggedHost(HostProcess):
    def __init__(self, env: dict[str, str], log: Path):
        super().__init__(APPS / "basic", "postgres", env=env, log_path=log)
        self.log = log

    def text(self) -> str:
        return self.log.read_text() if self.log.exists() else ""

    def held(self) -> set[int]:
        response = self.get("/admin/host/status")
        return set(response.json()["partitions"]["held"]) if response.status == 200 else set()


@pytest.fixture
def hosts(tmp_path: Path, postgres_url: str):
    made: list[LoggedHost] = []
    base = {
        "DURABLE_HOST_POSTGRES": postgres_url,
        "DURABLE_HOST_HUB": "G" + uuid.uuid4().hex[:12],
        "DURABLE_HOST_LEASE_SECONDS": str(LEASE),
        "BASIC_APP_MARKS": str(tmp_path / "marks.txt"),
    }

    def make(name: str) -> LoggedHost:
        host = LoggedHost(dict(base), tmp_path / f"{name}.log")
        made.append(host)
        return host

    make.env = base  # type: ignore[attr-defined]
    yield make
    for host in made:
        if host.process and host.process.poll() is None:
            host.process.send_signal(signal.SIGCONT)
        host.kill()


def marks(tmp_path: Path) -> list[str]:
    path = tmp_path / "marks.txt"
    return path.read_text().splitlines() if path.exists() else []


def histories(env: dict[str, str], instance_ids: list[str]) -> list[list[dict[str, Any]]]:
    async def read() -> list[list[dict[str, Any]]]:
        store = PostgresStore(
            from_spec("postgres", env["DURABLE_HOST_HUB"], env=env), read_only=True
        )
        await store.open()
        try:
            return [await store.get_history(i) for i in instance_ids]
        finally:
            await store.close()

    return asyncio.run(read())


@pytest.mark.timeout(240)
def test_a_sigkilled_hosts_partitions_are_taken_within_the_lease_and_nothing_is_lost(
    hosts, tmp_path
) -> None:
    first = hosts("first").start()
    other = hosts("other").start()
    wait_for(lambda: len(other.held()) == 2 and len(first.held()) == 2, 60, "a share each")
    started = [first.start_orchestration("fan_out", {"count": 20}) for _ in range(6)]
    started += [start_slow(first, 2.0) for _ in range(4)]
    wait_for(lambda: marks(tmp_path).count("slow:start:2.0") >= 1, 60, "the slow steps to run")

    assert first.process is not None
    first.process.send_signal(signal.SIGKILL)
    first.process.wait(10)
    wait_for(lambda: len(other.held()) == 4, LEASE + 30, "the survivor to take every partition")

    for instance_id in started:
        assert other.wait_for_status(instance_id, timeout=90)["runtimeStatus"] == "Completed"
    assert [other.status(i)["output"] for i in started[:6]] == [sum(2 * i for i in range(20))] * 6
    assert [other.status(i)["output"] for i in started[6:]] == [2.0] * 4
    for events in histories(hosts.env, started):
        assert_no_fork(events)


@pytest.mark.timeout(240)
def test_a_sigstopped_host_past_its_lease_is_fenced_and_no_write_of_it_lands(
    hosts, tmp_path
) -> None:
    first = hosts("first").start()
    other = hosts("other").start()
    wait_for(lambda: len(other.held()) == 2, 60, "the second host to take its share")
    slow = [start_slow(first, 3.0) for _ in range(6)]
    wait_for(lambda: marks(tmp_path).count("slow:start:3.0") >= 6, 60, "the slow steps to run")

    assert first.process is not None
    first.process.send_signal(signal.SIGSTOP)  # alive, silent, its leases lapsing
    wait_for(lambda: len(other.held()) == 4, LEASE + 30, "the other host to take them all")
    fresh = [
        other.start_orchestration("fan_out", {"count": 30}),
        other.start_orchestration("parent"),
    ]
    for instance_id in slow + fresh:
        assert other.wait_for_status(instance_id, timeout=90)["runtimeStatus"] == "Completed"
    first.process.send_signal(signal.SIGCONT)
    wait_for(lambda: "lost" in first.text(), 30, "the stopped host to find its partitions lost")

    assert first.process.poll() is None  # it rejoins, serving
    assert re.search(r"partition \d+ lost", first.text())
    everything = slow + fresh
    for events in histories(hosts.env, everything):
        assert_no_fork(events)
    assert [other.status(i)["output"] for i in slow] == [3.0] * 6
    wait_for(lambda: len(first.held()) + len(other.held()) == 4, 30, "the hub to settle")
