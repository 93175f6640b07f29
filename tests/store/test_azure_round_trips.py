"""Azure store: what one activity step costs in storage requests, and the instance record
that comes with a fetch (the engine reads it next) without a read of its own."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from durable_host.core.orchestration import Episode
from durable_host.core.records import Completion
from tests.store.contract_support import T0, activity, event, raised, started

RESULT = {"kind": "event", "event": {"EventType": 5, "TaskScheduledId": 0}}


@pytest.fixture
def kind() -> str:
    return "azure"


def test_an_activity_step_costs_four_requests(run_store) -> None:
    async def body(store: Any) -> None:
        await started(store, "a")
        await store.fetch_messages("a", T0)
        [work] = await store.commit_episode("a", Episode(outbox=[activity("a", 0)]), T0)
        before = store.round_trips

        # The step as the engine takes it: the activity's result, then the next episode.
        assert await store.complete_activity(work.work_id, "a", RESULT, T0)
        messages = await store.fetch_messages("a", T0)
        assert (await store.get_instance("a")).status == "Running"
        assert await store.begin_attempt("a") == 1
        episode = Episode(
            consumed=[i for i, _ in messages], events=[event(1)], outbox=[activity("a", 1)]
        )
        [work] = await store.commit_episode("a", episode, T0)

        # completion, fetch, attempt, commit: no read of the record, no hint to write
        assert store.round_trips - before == 4

        # A status request between steps reads the head this process just committed.
        assert (await store.get_instance("a")).updated_at == T0
        assert store.round_trips - before == 4

    run_store(body)


def test_an_activity_step_committed_with_its_episode_costs_one_request(run_store) -> None:
    async def body(store: Any) -> None:
        await started(store, "a")
        await store.fetch_messages("a", T0)
        episode = Episode(outbox=[activity("a", 0)])
        [work] = await store.commit_episode("a", episode, T0, count_next=True)
        before = store.round_trips

        # The step as the engine takes it when the result comes from its own activity run:
        # no inbox to read, the attempt counted by the last commit, the record and the
        # head's ETag known from that commit.
        for step in range(1, 4):
            assert (await store.get_instance("a")).status == "Running"
            completion = Completion(work.work_id, RESULT, consumed=True)
            episode = Episode(events=[event(step)], outbox=[activity("a", step)])
            [work] = await store.commit_step("a", [completion], episode, T0, count_next=True)

        assert store.round_trips - before == 3
        assert [w.task_id for w in await store.pending_activities()] == [3]

    run_store(body)


def test_the_record_a_fetch_read_serves_reads_until_the_instance_is_written(run_store) -> None:
    async def body(store: Any) -> None:
        await started(store, "a")
        await store.send("a", raised("x"), T0)

        await store.fetch_messages("a", T0)
        before = store.round_trips
        assert (await store.get_instance("a")).status == "Running"
        assert (await store.get_instance("a")).status == "Running"
        assert store.round_trips == before  # both from the fetch

        await store.send("a", raised("y"), T0, status="Suspended")
        assert (await store.get_instance("a")).status == "Suspended"

        await store.fetch_messages("a", T0)
        await store.commit_episode("a", Episode(events=[event(5)], status="Completed"), T0)
        assert (await store.get_instance("a")).status == "Completed"

        await store.fetch_messages("a", T0)
        await store.purge("a")
        assert await store.get_instance("a") is None

    run_store(body)


def test_concurrent_sends_to_one_instance_write_its_hint_once(run_store) -> None:
    async def body(store: Any) -> None:
        before = store.round_trips

        await asyncio.gather(*(store.send("e", raised(str(n)), T0) for n in range(10)))

        assert store.round_trips - before == 11  # one live hint, ten messages
        before = store.round_trips
        assert await store.discovery._poll_once() == ([], [], False)  # known: no survey
        assert store.round_trips - before == 1

    run_store(body)
