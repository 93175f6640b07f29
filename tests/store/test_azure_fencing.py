"""Azure Storage store across host processes: fencing, lost responses, storage outages.

Real host processes on Azurite. Each test has a task hub of its own (``DURABLE_HOST_HUB``),
so hosts of different tests never meet. Waits are bounded; nothing asserts on durations.
"""

from __future__ import annotations

import asyncio
import re
import signal
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from durable_host.core.history import COMPLETION_TYPES, SCHEDULING_TYPES, EventType
from tests.harness import APPS, HostProcess, store_specs, wait_for

pytestmark = pytest.mark.skipif(
    "azure" not in store_specs(), reason="DURABLE_TEST_STORES does not include azure"
)


class LoggedHost(HostProcess):
    """A host process on the session's Azurite whose stderr goes to a given file."""

    def __init__(self, env: dict[str, str], log: Path):
        super().__init__(APPS / "basic", "azure", env=env, log_path=log)
        self.log = log

    def text(self) -> str:
        return self.log.read_text() if self.log.exists() else ""


@pytest.fixture
def hosts(tmp_path: Path, azurite_connection: str):
    """Factory of logged hosts on one fresh hub of the session's Azurite."""
    made: list[LoggedHost] = []
    base = {
        "AzureWebJobsStorage": azurite_connection,
        "DURABLE_HOST_HUB": "F" + uuid.uuid4().hex[:12],
        "BASIC_APP_MARKS": str(tmp_path / "marks.txt"),
    }

    def make(name: str, **extra: str) -> LoggedHost:
        host = LoggedHost({**base, **extra}, tmp_path / f"{name}.log")
        made.append(host)
        return host

    make.env = base  # type: ignore[attr-defined]
    yield make
    for host in made:
        if host.process and host.process.poll() is None:
            host.process.send_signal(signal.SIGCONT)
        host.kill()


def stored_histories(env: dict[str, str], instance_ids: list[str]) -> list[list[dict[str, Any]]]:
    """Raw stored histories, read without taking the hub's lease."""
    from durable_host.store.azure import AzureStore

    async def read() -> list[list[dict[str, Any]]]:
        store = AzureStore(env["AzureWebJobsStorage"], env["DURABLE_HOST_HUB"], read_only=True)
        await store.open()
        try:
            return [await store.get_history(i) for i in instance_ids]
        finally:
            await store.close()

    return asyncio.run(read())


def assert_no_fork(events: list[dict[str, Any]]) -> None:
    """One execution; every action scheduled once; every task and sub-orchestration
    completed exactly once; every entity response (an event named by its request id) once."""
    kinds = Counter(e["EventType"] for e in events)
    assert kinds[EventType.EXECUTION_STARTED] == 1, events
    assert kinds[EventType.EXECUTION_COMPLETED] == 1, events
    scheduled = [e["EventId"] for e in events if e["EventType"] in SCHEDULING_TYPES]
    assert len(scheduled) == len(set(scheduled)), events
    tasks = [
        e["EventId"]
        for e in events
        if e["EventType"] in (EventType.TASK_SCHEDULED, EventType.SUB_ORCHESTRATION_CREATED)
    ]
    completed = [e["TaskScheduledId"] for e in events if e["EventType"] in COMPLETION_TYPES]
    assert sorted(completed) == sorted(tasks), events
    raised = [e["Name"] for e in events if e["EventType"] == EventType.EVENT_RAISED]
    assert len(raised) == len(set(raised)), events


def start_slow(host: HostProcess, seconds: float) -> str:
    """``slow_step`` through the app's own HTTP starter (it passes the input as text)."""
    return host.post("/api/orchestrators/slow_step", seconds).json()["id"]


def marks(tmp_path: Path) -> list[str]:
    path = tmp_path / "marks.txt"
    return path.read_text().splitlines() if path.exists() else []


# --- split brain ---------------------------------------------------------------------------


def held_count(host: LoggedHost) -> int:
    """Partitions the host holds now, from its log (taken minus released or lost)."""
    text = host.text()
    return len(re.findall(r"this host holds it as epoch", text)) - len(
        re.findall(r"partition \d+ (?:released|lost)", text)
    )


def test_a_stopped_host_is_fenced_and_the_other_takes_over_without_a_fork(hosts, tmp_path) -> None:
    first = hosts("first").start()
    other = hosts("other").start()  # both serve; the partitions are balanced between them
    wait_for(lambda: held_count(other) == 2, 60, "the second host to take its share")
    warm = first.start_orchestration("hello_sequence")
    first.wait_for_status(warm)

    slow = [start_slow(first, 3.0) for _ in range(6)]
    wait_for(lambda: marks(tmp_path).count("slow:start:3.0") >= 6, 60, "the slow activities to run")
    first.process.send_signal(signal.SIGSTOP)  # a stalled host: alive, silent, leases lapsing
    wait_for(lambda: held_count(other) == 4, 60, "the other host to take the lapsed partitions")
    fresh = [
        other.start_orchestration("fan_out", {"count": 30}),
        other.start_orchestration("parent"),
    ]
    for instance_id in slow + fresh:
        other.wait_for_status(instance_id, timeout=60)
    first.process.send_signal(signal.SIGCONT)
    wait_for(lambda: "lost" in first.text(), 30, "the stopped host to find its partitions lost")

    assert first.process.poll() is None  # it rejoins: no partition of its own, serving
    everything = [warm, *slow, *fresh]
    assert [other.status(i)["runtimeStatus"] for i in everything] == ["Completed"] * 9
    for events in stored_histories(hosts.env, everything):
        assert_no_fork(events)
    assert [other.status(i)["output"] for i in slow] == [3.0] * 6
    assert other.status(fresh[0])["output"] == sum(2 * i for i in range(30))


def test_two_hosts_share_the_hub_and_a_clean_stop_hands_over_at_once(hosts) -> None:
    first = hosts("first").start()
    other = hosts("other").start()
    wait_for(lambda: held_count(other) == 2, 60, "the second host to take its share")
    done = [first.start_orchestration("chain", {"steps": 5}) for _ in range(4)]
    done += [other.start_orchestration("chain", {"steps": 5}) for _ in range(4)]
    for instance_id in done:
        first.wait_for_status(instance_id)

    first.stop()  # a clean stop releases its partitions: the other takes them next round
    wait_for(lambda: held_count(other) == 4, 20, "the other host to take every partition")
    assert all(other.status(i)["output"] == 20 for i in done)
    later = other.start_orchestration("chain", {"steps": 5})
    assert other.wait_for_status(later)["output"] == 20


# --- lost responses ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("step_commit", "faults"),
    [
        # Activity results commit with their episodes: the commits lose their responses.
        ("1", "commit@2,commit@5,commit@9,commit@12,commit@15,stage@1,stage@3"),
        # Each result its own completion (the setting off): completions lose theirs too.
        ("0", "commit@2,commit@5,commit@9,complete@1,complete@4,stage@1,stage@3"),
    ],
)
def test_writes_whose_response_was_lost_apply_once(hosts, step_commit: str, faults: str) -> None:
    host = hosts(
        "faulty", DURABLE_HOST_AZURE_FAULTS=faults, DURABLE_HOST_STEP_COMMIT=step_commit
    ).start()

    ids = [
        host.start_orchestration("hello_sequence"),
        host.start_orchestration("parent"),
        host.post("/api/orchestrators/counter_caller", "k1").json()["id"],
        host.start_orchestration("fan_out", {"count": 10}),
    ]
    for instance_id in ids:
        host.wait_for_status(instance_id, timeout=60)

    assert len(re.findall(r"fault injection: response of \w+@\d+ lost", host.text())) == 7
    outputs = [host.status(i)["output"] for i in ids]
    assert outputs[0] == ["Hello Tokyo!", "Hello Seattle!", "Hello London!"]
    assert outputs[1]["a"] == outputs[0] and outputs[1]["b"] == 6
    assert outputs[2] == 11
    assert outputs[3] == 90
    for events in stored_histories(hosts.env, ids):
        assert_no_fork(events)


# --- storage outage ----------------------------------------------------------------------------


def test_an_azurite_outage_is_ridden_out_and_every_instance_completes(tmp_path) -> None:
    from durable_host.ops import azurite

    location, ports = tmp_path / "azurite", azurite.free_ports(3)
    emulator = azurite.start(location, ports, log=tmp_path / "azurite.log")  # type: ignore[arg-type]
    env = {
        "AzureWebJobsStorage": emulator.connection_string,
        "DURABLE_HOST_HUB": "O" + uuid.uuid4().hex[:12],
        "BASIC_APP_MARKS": str(tmp_path / "marks.txt"),
    }
    host = LoggedHost(env, tmp_path / "host.log")
    try:
        host.start()
        ids = [host.post("/api/orchestrators/sleeper", 2).json()["id"] for _ in range(3)]
        ids += [start_slow(host, 2.0) for _ in range(2)]
        ids += [host.start_orchestration("chain", {"steps": 20})]
        wait_for(
            lambda: marks(tmp_path).count("slow:start:2.0") == 2, 60, "the slow activities to run"
        )

        emulator.stop()
        time.sleep(3)  # storage is gone for a while; the host keeps running and retrying
        assert host.process.poll() is None
        emulator = azurite.start(location, ports, log=tmp_path / "azurite.log")  # type: ignore[arg-type]
        for instance_id in ids:
            host.wait_for_status(instance_id, timeout=60)

        assert "not answering" in host.text()
        assert [host.status(i)["runtimeStatus"] for i in ids] == ["Completed"] * len(ids)
        assert host.status(ids[-1])["output"] == sum(2 * i for i in range(20))
        for events in stored_histories(env, ids):
            assert_no_fork(events)
    finally:
        host.kill()
        emulator.stop()


def test_store_writes_whose_response_was_lost_apply_once(azurite_connection) -> None:
    from durable_host.core.orchestration import Episode, Outgoing
    from durable_host.store.azure import AzureStore, LostResponses

    async def body() -> None:
        store = AzureStore(azurite_connection, "L" + uuid.uuid4().hex[:12])
        await store.open()
        try:
            store.tables.faults = LostResponses("send@1,commit@1,commit@2,stage@1,complete@1")
            started = {"kind": "start", "event": {"EventType": 0, "Name": "o"}}
            await store.send("a", started, "t")
            messages = await store.fetch_messages("a", "t")
            episode = Episode(
                consumed=[i for i, _ in messages],
                events=[{"EventType": 0}],
                replace_history=True,
                execution_id="e1",
                status="Running",
                name="o",
                outbox=[
                    Outgoing(
                        "activity",
                        "a",
                        {
                            "instance_id": "a",
                            "execution_id": "e1",
                            "task_id": 0,
                            "name": "act",
                            "input_json": None,
                        },
                    ),
                    Outgoing("message", "b", {"kind": "event", "event": {"EventType": 15}}),
                ],
            )
            [work] = await store.commit_episode("a", episode, "t")
            completed = await store.complete_activity(work.work_id, "a", {"kind": "event"}, "t")
            await store.fetch_messages("a", "t")
            await store.commit_episode("a", Episode(events=[{"EventType": 1}]), "t")

            assert completed is True
            assert await store.get_history("a") == [{"EventType": 0}, {"EventType": 1}]
            assert [m["kind"] for _, m in await store.fetch_messages("a", "t")] == ["event"]
            assert len(await store.fetch_messages("b", "t")) == 1
            assert await store.pending_activities() == []
        finally:
            await store.close()

    asyncio.run(body())
