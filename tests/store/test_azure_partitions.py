"""Several stores on one Azurite hub: partitions balanced, handed over, raced for, fenced.

Each store here is what one host opens (its own writer id, leases and heartbeat); they
share one process, so none of them counts as a dead process of this machine. Balancing
rounds are driven by hand (``membership.round``) where the test needs to know when they
happen; waits are bounded in count and time, nothing asserts on durations.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest

from durable_host.cluster.ownership import partition_of
from durable_host.core.orchestration import Episode
from durable_host.store.base import StoreError, UnitLostError
from tests.harness import store_specs

pytestmark = pytest.mark.skipif(
    "azure" not in store_specs(), reason="DURABLE_TEST_STORES does not include azure"
)

START = {"kind": "start", "event": {"EventType": 0, "Name": "o"}}


def stores(connection: str, hub: str, n: int, **kwargs: Any) -> list[Any]:
    from durable_host.store.azure import AzureStore

    return [AzureStore(connection, hub, lease_seconds=15, **kwargs) for _ in range(n)]


async def balance(members: list[Any], rounds: int = 6) -> None:
    for _ in range(rounds):
        for store in members:
            await store.membership.round()


def held(store: Any) -> set[int]:
    return set(store.partitions.held())


def an_instance_in(unit: int, count: int = 4) -> str:
    return next(f"i{n}" for n in range(10_000) if partition_of(f"i{n}", count) == unit)


def first_episode(messages: list[Any], events: list[dict[str, Any]], **more: Any) -> Episode:
    """The first episode of an orchestration ``o``, consuming ``messages``."""
    return Episode(
        consumed=[i for i, _ in messages],
        events=events,
        replace_history=True,
        execution_id="e1",
        status="Running",
        name="o",
        **more,
    )


def test_two_then_three_hosts_balance_to_a_fair_share(azurite_connection) -> None:
    async def body() -> None:
        a, b, c = stores(azurite_connection, "P" + uuid.uuid4().hex[:12], 3)
        await a.open()
        try:
            assert held(a) == {0, 1, 2, 3}  # alone: everything at open
            await b.open()
            assert held(b) == set()  # held by a live host: b waits for a to give some back
            await balance([a, b])
            assert sorted([len(held(a)), len(held(b))]) == [2, 2]
            assert held(a).isdisjoint(held(b))
            await c.open()
            await balance([a, b, c])
            assert sorted(len(held(s)) for s in (a, b, c)) == [1, 1, 2]
            assert held(a) | held(b) | held(c) == {0, 1, 2, 3}
        finally:
            for s in (c, b, a):
                await s.close()

    asyncio.run(body())


def test_a_graceful_stop_hands_every_partition_over_at_once(azurite_connection) -> None:
    async def body() -> None:
        a, b = stores(azurite_connection, "P" + uuid.uuid4().hex[:12], 2)
        await a.open()
        await b.open()
        try:
            assert held(a) == {0, 1, 2, 3}
            await a.close()
            await b.membership.round()  # the next round, not the lease's end
            assert held(b) == {0, 1, 2, 3}
        finally:
            await b.close()

    asyncio.run(body())


def test_two_hosts_racing_for_one_partition_one_wins(azurite_connection) -> None:
    async def body() -> None:
        hub = "P" + uuid.uuid4().hex[:12]
        a, b = stores(azurite_connection, hub, 2)
        await a.open()
        await b.open()
        try:
            await a.partitions.release(2)
            for _ in range(5):  # bounded: each race is decided by the service
                won = await asyncio.gather(
                    a.partitions.acquire(2, None), b.partitions.acquire(2, None)
                )
                assert sorted(won) == [False, True]
                winner = a if won[0] else b
                await winner.partitions.release(2)
        finally:
            await b.close()
            await a.close()

    asyncio.run(body())


def test_a_changed_partition_count_is_refused_naming_both(azurite_connection) -> None:
    from durable_host.store.azure.partitions import PartitionCountError

    async def body() -> None:
        hub = "P" + uuid.uuid4().hex[:12]
        [a] = stores(azurite_connection, hub, 1)
        [other] = stores(azurite_connection, hub, 1, partition_count=8)
        await a.open()
        try:
            with pytest.raises(PartitionCountError, match="partitionCount 4.*partitionCount 8"):
                await other.open()
        finally:
            await other.close()
            await a.close()

    asyncio.run(body())


def test_a_host_past_its_lease_is_fenced_and_nothing_it_writes_lands(azurite_connection) -> None:
    """The SIGSTOP case in one process: ``a`` stops renewing (its loop is cancelled, as a
    stopped process's would not run), ``b`` takes the partition once the lease lapsed, and
    ``a``'s commit, attempted afterwards, is refused before any request."""

    async def body() -> None:
        hub = "P" + uuid.uuid4().hex[:12]
        a, b = stores(azurite_connection, hub, 2)
        await a.open()
        await b.open()
        instance = an_instance_in(1)
        try:
            await a.send(instance, START, "t")
            messages = await a.fetch_messages(instance, "t")
            assert messages
            assert a.membership._task is not None
            a.membership._task.cancel()  # "stopped": no renewal from now on
            first_epoch = a.partitions.epochs()[1]
            deadline = time.monotonic() + 40
            while 1 not in held(b) and time.monotonic() < deadline:
                await b.partitions.acquire(1, None)
                await asyncio.sleep(1.0)
            assert 1 in held(b), "b never took the lapsed partition"
            assert b.partitions.epochs()[1] == first_epoch + 1
            episode = first_episode(messages, [{"EventType": 0}])
            with pytest.raises(UnitLostError):
                await a.commit_episode(instance, episode, "t")
            assert 1 not in held(a)
            assert await b.get_history(instance) == []  # nothing of a's landed
            assert await a.fetch_messages(instance, "t") == []  # a no longer runs it
            again = await b.fetch_messages(instance, "t")
            episode.consumed = [i for i, _ in again]
            await b.commit_episode(instance, episode, "t")
            assert await b.get_history(instance) == [{"EventType": 0}]
        finally:
            await b.close()
            await a.close()

    asyncio.run(body())


def test_a_silent_host_is_evicted_before_its_lease_lapses_and_is_fenced(
    azurite_connection, caplog
) -> None:
    """``a`` hangs (no heartbeat, no renewal; its lease still runs for seconds): ``b`` sees
    the heartbeat unchanged for the silence, evicts the partition and commits first; ``a``,
    which still believes its lease valid, commits afterwards and nothing of it lands."""

    async def body() -> None:
        hub = "P" + uuid.uuid4().hex[:12]
        a, b = stores(azurite_connection, hub, 2, silence_seconds=1)
        await a.open()
        await b.open()
        instance = an_instance_in(1)
        try:
            await a.send(instance, START, "t")
            messages = await a.fetch_messages(instance, "t")
            first_epoch = a.partitions.epochs()[1]
            for task in (a.membership._task, a.membership._beats, a.membership._watch):
                assert task is not None
                task.cancel()  # hung: from now on its heartbeat does not change
            deadline = time.monotonic() + 30
            while held(b) != {0, 1, 2, 3} and time.monotonic() < deadline:
                await asyncio.sleep(0.1)  # b's own loops notice and act
            assert held(b) == {0, 1, 2, 3}, "b never evicted the silent host"
            assert "partition 1 evicted from" in caplog.text
            assert b.partitions.epochs()[1] == first_epoch + 1
            assert 1 in held(a)  # a still believes it holds the partition
            again = await b.fetch_messages(instance, "t")
            assert [m for _, m in again] == [m for _, m in messages]
            episode = first_episode(again, [{"EventType": 0}])
            await b.commit_episode(instance, episode, "t")
            late = first_episode(messages, [{"EventType": 0}, {"EventType": 12}])
            with pytest.raises(StoreError):  # the head's ETag changed under it: 409
                await a.commit_episode(instance, late, "t")
            assert await b.get_history(instance) == [{"EventType": 0}]  # nothing of a's
        finally:
            await b.close()
            await a.close()

    caplog.set_level("INFO")
    asyncio.run(body())


def test_only_the_owner_discovers_an_instance_any_host_may_start(azurite_connection) -> None:
    async def body() -> None:
        hub = "P" + uuid.uuid4().hex[:12]
        a, b = stores(azurite_connection, hub, 2)
        await a.open()
        await b.open()
        try:
            await balance([a, b])
            unit = min(held(b))
            instance = an_instance_in(unit)
            await a.send(instance, START, "t")  # a client write on a host that is no owner
            assert instance not in await a.ready_instances("t")
            assert instance in await b.ready_instances("t")
            assert await a.fetch_messages(instance, "t") == []
            assert len(await b.fetch_messages(instance, "t")) == 1
        finally:
            await b.close()
            await a.close()

    asyncio.run(body())


def test_activity_work_is_anyones_unless_a_live_host_claims_it(azurite_connection) -> None:
    from durable_host.core.orchestration import Outgoing

    async def body() -> None:
        hub = "P" + uuid.uuid4().hex[:12]
        a, b = stores(azurite_connection, hub, 2)
        await a.open()
        await b.open()
        instance = an_instance_in(0)
        try:
            await a.send(instance, START, "t")
            messages = await a.fetch_messages(instance, "t")
            activity = {
                "instance_id": instance,
                "execution_id": "e1",
                "task_id": 0,
                "name": "act",
                "input_json": None,
            }
            episode = first_episode(
                messages, [{"EventType": 0}], outbox=[Outgoing("activity", instance, activity)]
            )
            [work] = await a.commit_episode(instance, episode, "t")
            assert await b.pending_activities() == []  # a runs it (a live claimer)
            assert await b.mark_activity_dequeued(work.work_id) == 0
            await a.release_activity(work.work_id)  # e.g. waiting for a slot: anyone's now
            [found] = await b.pending_activities()
            assert await b.mark_activity_dequeued(found.work_id) == 1
            assert await a.mark_activity_dequeued(work.work_id) == 0  # b runs it now
            assert await b.complete_activity(work.work_id, instance, {"kind": "event"}, "t")
            # The owner hears of a result another host wrote at its next poll, not after
            # ``STALE_SECONDS`` (b rewrote the partition's live hint around its write).
            ready, _ = await a.poll()
            assert instance in ready
            assert [m["kind"] for _, m in await a.fetch_messages(instance, "t")] == ["event"]
        finally:
            await b.close()
            await a.close()

    asyncio.run(body())


def test_heartbeats_expire_on_the_service_clock_whatever_the_writers_wall_clock(
    azurite_connection,
) -> None:
    """A host an hour behind wrote an ``expires`` an hour in the past, one an hour ahead an
    hour in the future: what counts is the heartbeat's Last-Modified and its ttl on the
    service's clock, as this host read it at its own heartbeat. A ttl that is no number
    lives as long as a heartbeat of the earlier version (the lease + 5 s)."""

    async def body() -> None:
        [a] = stores(azurite_connection, "P" + uuid.uuid4().hex[:12], 1)
        await a.open()
        try:
            now = time.time()
            for name, expires, ttl in (
                ("behind", now - 3600 + 20, "20"),
                ("ahead", now + 3600, "4"),
                ("garbled", now, "soon"),
            ):
                await a.partitions._host_blob(name).upload_blob(
                    b"",
                    overwrite=True,
                    metadata={"owner": name, "expires": f"{expires:.3f}", "ttl": ttl},
                )
            await a.membership.round()
            assert a.partitions.store_now() is not None
            assert {"behind", "ahead", "garbled"} <= {m.id for m in await a.partitions.members()}
            # All three are members: a's share is 1 of 4 now, the rest waits for them.
            assert len(held(a)) == 1
            await asyncio.sleep(6.0)  # "ahead" stopped beating: its ttl of 4 s is over
            await a.membership.round()
            listed = {m.id for m in await a.partitions.members()}
            assert {"behind", "garbled"} <= listed and "ahead" not in listed
        finally:
            await a.close()

    asyncio.run(body())
