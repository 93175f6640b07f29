"""Azure store: finding work costs the same whatever the hub's history holds.

Discovery (ready instances, due timers, pending activities, ``poll``) reads the index
table and the partitions of the instances that have work; it never scans the hub table,
so an instance with hundreds of history rows and many finished instances beside it do not
change how many requests it sends or which rows they can reach.
"""

from __future__ import annotations

from typing import Any

import pytest

from durable_host.core.orchestration import Episode, Outgoing
from durable_host.functions.config import NON_RUNNING
from tests.store.contract_support import (
    T0,
    activity,
    at,
    event,
    raised,
    record,
    start_message,
    started,
)


@pytest.fixture
def kind() -> str:
    return "azure"


async def discover(store: Any) -> tuple[int, list[tuple[str, Any]], tuple[Any, ...]]:
    """Every discovery operation once: requests sent, query filters, and the answers."""
    store.discovery._checked.clear()
    store.index.touched.clear()  # as if nothing had happened here lately: poll surveys
    before = store.round_trips
    store.tables.queries.clear()
    answers = (
        await store.ready_instances(at(100)),
        await store.ready_instances(at(100), due_only=True),
        await store.next_due(at(100)),
        sorted(w.task_id for w in await store.pending_activities()),
        (await store.discovery._poll_once())[:2],
    )
    return store.round_trips - before, list(store.tables.queries), answers


def test_discovery_reads_no_history_and_costs_the_same_in_a_large_hub(run_store) -> None:
    async def body(store: Any) -> None:
        # Work of every kind: a message, a due timer, a later timer, an activity.
        await store.send("ready", raised("go"), T0)
        await started(store, "timed")
        await store.fetch_messages("timed", T0)
        timers = [
            Outgoing("message", "timed", raised("due"), visible_at=at(50)),
            Outgoing("message", "timed", raised("later"), visible_at=at(200)),
        ]
        await store.commit_episode("timed", Episode(events=[event(1)], outbox=timers), T0)
        await started(store, "working")
        await store.fetch_messages("working", T0)
        await store.commit_episode("working", Episode(outbox=[activity("working", 7)]), T0)
        await discover(store)  # hints of finished work are dropped by the first round
        small_cost, small_queries, small_answers = await discover(store)

        # The hub grows: a long history and many finished instances.
        await started(store, "long", events=400)
        await store.fetch_messages("long", T0)
        await store.commit_episode("long", Episode(events=[event(n) for n in range(400, 450)]), T0)
        for n in range(30):
            await started(store, f"done{n}", events=20)
            await store.fetch_messages(f"done{n}", T0)
            await store.commit_episode(
                f"done{n}", Episode(events=[event(99)], status="Completed"), T0
            )
        assert len(await store.get_history("long")) == 450
        await discover(store)
        large_cost, large_queries, large_answers = await discover(store)

        assert small_answers == large_answers
        assert small_answers[:4] == (["ready", "timed"], ["timed"], at(200), [7])
        assert large_cost == small_cost
        assert len(large_queries) == len(small_queries)
        # Every query names one partition - the index's, or one instance's - and no range
        # it reads holds history rows ("h<generation>.<n>"): no scan, no history.
        assert large_queries
        for flt, params in large_queries:
            assert flt.startswith("PartitionKey eq @pk"), flt
            assert not params.get("lo", "~") <= "h" < params.get("hi", ""), params

    run_store(body)


def test_poll_reads_only_the_index_while_nothing_is_foreign_or_stale(run_store) -> None:
    async def body(store: Any) -> None:
        await store.send("a", raised("x"), T0)
        await started(store, "b")
        await store.fetch_messages("b", T0)
        await store.commit_episode("b", Episode(outbox=[activity("b", 1)]), T0)
        before = store.round_trips

        assert await store.discovery._poll_once() == ([], [], False)
        assert store.round_trips - before == 1  # the live hints, nothing else

        store.index.touched.clear()  # nothing happened to them for a long time
        ready, works, foreign = await store.discovery._poll_once()
        assert (ready, foreign) == (["a"], False)
        assert works == []  # the work item of "b" is with this process's engine

    run_store(body)


def test_a_hub_without_an_index_gets_one_when_it_is_opened(run_store) -> None:
    async def body(store: Any) -> None:
        await store.send("a", raised("x"), T0)
        await store.create_instance(record("t"), start_message(), NON_RUNNING, visible_at=at(9))
        # As a hub written by a store without an index: no hints, no mark.
        index = store.tables.index
        rows = [r async for r in index.list_entities()]
        for row in rows:
            await index.delete_entity(row["PartitionKey"], row["RowKey"])

    async def reopened(store: Any) -> None:
        assert await store.ready_instances(T0) == ["a"]
        assert await store.next_due(T0) == at(9)

    run_store(body)
    run_store(reopened)
