"""The Store port's contract, one suite for every implementation (SQLite and Azure Storage):
instances, messages, commits, activities, entities, attempts and rewrites.

Each test drives the port directly with hand-made episodes, as the engine would: fetch the
inbox, commit an episode, read back. Times are passed in (``now``), never slept for. The
task hub's other services (queries, purge, secrets, schedules, ready order) are in
``test_store_contract_hub.py``; the shared helpers in ``contract_support.py``.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from durable_host.core.orchestration import Episode, Outgoing
from durable_host.functions.config import ANY_STATE, NON_RUNNING
from durable_host.store.base import EntityCommit, InstanceExistsError, InstanceRecord
from tests.store.contract_support import (
    T0,
    activity,
    at,
    event,
    fail_at_commit,
    names,
    raised,
    record,
    start_message,
    started,
)

# --- create and send ---------------------------------------------------------------------------


def test_create_refuses_a_running_instance_and_restarts_a_finished_one_clean(run_store) -> None:
    async def body(store: Any) -> None:
        await started(store, "a", events=2)
        with pytest.raises(InstanceExistsError):
            await store.create_instance(record("a"), start_message(), NON_RUNNING)
        await store.send("a", raised("late"), T0)
        messages = await store.fetch_messages("a", T0)
        await store.commit_episode(
            "a",
            Episode(consumed=[], events=[event(9)], status="Completed", output_json='"done"'),
            T0,
        )
        assert (await store.get_instance("a")).status == "Completed"

        await store.create_instance(record("a"), start_message("again"), NON_RUNNING)

        assert len(messages) == 1
        assert await store.get_history("a") == []
        fresh = await store.fetch_messages("a", T0)
        assert [m["kind"] for _, m in fresh] == ["start"]
        assert fresh[0][1]["event"]["Name"] == "again"
        restarted = await store.get_instance("a")
        assert (restarted.status, restarted.output_json) == ("Pending", None)

    run_store(body)


def test_any_state_overrides_a_running_instance(run_store) -> None:
    async def body(store: Any) -> None:
        await started(store, "a")
        await store.create_instance(record("a"), start_message(), ANY_STATE)
        assert (await store.get_instance("a")).status == "Pending"

    run_store(body)


def test_messages_come_in_send_order_up_to_the_limit(run_store) -> None:
    async def body(store: Any) -> None:
        for name in ("one", "two", "three"):
            await store.send("a", raised(name), T0)

        everything = await store.fetch_messages("a", T0)
        first_two = await store.fetch_messages("a", T0, limit=2)

        assert names(everything) == ["one", "two", "three"]
        assert names(first_two) == ["one", "two"]
        assert [i for i, _ in everything] == sorted(i for i, _ in everything)

    run_store(body)


def test_a_timer_message_stays_invisible_until_its_time(run_store) -> None:
    async def body(store: Any) -> None:
        await started(store, "a")
        await store.fetch_messages("a", T0)
        timer = Outgoing("message", "a", raised("timer"), visible_at=at(60))
        await store.commit_episode("a", Episode(events=[event(1)], outbox=[timer]), T0)

        assert await store.fetch_messages("a", at(30)) == []
        assert await store.ready_instances(at(30)) == []
        assert await store.ready_instances(at(30), due_only=True) == []
        assert await store.next_due(at(30)) == at(60)
        assert names(await store.fetch_messages("a", at(60))) == ["timer"]
        assert await store.ready_instances(at(61), due_only=True) == ["a"]
        assert await store.next_due(at(61)) is None

    run_store(body)


def test_a_scheduled_start_waits_for_its_time(run_store) -> None:
    async def body(store: Any) -> None:
        await store.create_instance(record("a"), start_message(), NON_RUNNING, visible_at=at(10))

        assert await store.fetch_messages("a", at(5)) == []
        assert await store.next_due(at(5)) == at(10)
        assert [m["kind"] for _, m in await store.fetch_messages("a", at(10))] == ["start"]

    run_store(body)


def test_ready_instances_lists_instances_with_visible_messages(run_store) -> None:
    async def body(store: Any) -> None:
        await store.send("b", raised("x"), T0)
        await store.send("a", raised("y"), T0)

        assert sorted(await store.ready_instances(T0)) == ["a", "b"]
        assert await store.ready_instances(T0, due_only=True) == []

    run_store(body)


# --- commits -----------------------------------------------------------------------------------


def test_a_commit_applies_history_status_and_every_outgoing_message(run_store) -> None:
    async def body(store: Any) -> None:
        await started(store, "a")
        await store.send("a", raised("go"), T0)
        messages = await store.fetch_messages("a", T0)
        episode = Episode(
            consumed=[i for i, _ in messages],
            events=[event(1), event(2)],
            status="Running",
            custom_status_json='"busy"',
            custom_status_changed=True,
            outbox=[activity("a", 0), Outgoing("message", "b", raised("hello"))],
        )

        created = await store.commit_episode("a", episode, at(1))

        assert [w.task_id for w in created] == [0]
        assert len(await store.get_history("a")) == 3
        instance = await store.get_instance("a")
        assert (instance.custom_status_json, instance.updated_at) == ('"busy"', at(1))
        assert await store.fetch_messages("a", at(1)) == []
        assert names(await store.fetch_messages("b", at(1))) == ["hello"]
        assert [w.work_id for w in await store.pending_activities()] == [created[0].work_id]

    run_store(body)


def test_a_sub_orchestration_is_created_by_its_first_episode(run_store) -> None:
    async def body(store: Any) -> None:
        await store.send("child", start_message("sub"), T0)
        messages = await store.fetch_messages("child", T0)
        parent = {"OrchestrationInstance": {"InstanceId": "parent", "ExecutionId": "p1"}}
        episode = Episode(
            consumed=[i for i, _ in messages],
            events=[event(0, kind=0)],
            replace_history=True,
            execution_id="c1",
            status="Running",
            name="sub",
            input_json="3",
            parent=parent,
        )

        await store.commit_episode("child", episode, at(2))

        child = await store.get_instance("child")
        assert (child.name, child.status, child.execution_id) == ("sub", "Running", "c1")
        assert (child.parent_instance_id, child.input_json, child.created_at) == (
            "parent",
            "3",
            at(2),
        )

    run_store(body)


def test_messages_for_an_unknown_instance_are_dropped_without_creating_it(run_store) -> None:
    async def body(store: Any) -> None:
        await store.send("ghost", raised("x"), T0)
        messages = await store.fetch_messages("ghost", T0)

        await store.commit_episode("ghost", Episode(consumed=[i for i, _ in messages]), T0)

        assert await store.get_instance("ghost") is None
        assert await store.fetch_messages("ghost", T0) == []

    run_store(body)


@pytest.mark.parametrize("fan_out", [3, 1000])
def test_a_commit_that_fails_midway_leaves_nothing_visible_and_a_retry_applies_all(
    run_store, kind: str, fan_out: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def body(store: Any) -> None:
        await started(store, "a", events=2)
        await store.send("a", raised("go"), T0)
        messages = await store.fetch_messages("a", T0)
        episode = Episode(
            consumed=[i for i, _ in messages],
            events=[event(n) for n in range(fan_out + 2)],
            status="Completed",
            output_json='"out"',
            outbox=[activity("a", n) for n in range(fan_out)]
            + [Outgoing("message", "b", raised("to-b")), Outgoing("message", "a", raised("self"))],
        )
        with monkeypatch.context() as patch:
            fail_at_commit(kind, store, patch)
            with pytest.raises(RuntimeError, match="injected"):
                await store.commit_episode("a", episode, at(1))

        assert len(await store.get_history("a")) == 2
        assert (await store.get_instance("a")).status == "Running"
        assert names(await store.fetch_messages("a", at(1))) == ["go"]
        assert await store.fetch_messages("b", at(1)) == []
        assert await store.pending_activities() == []
        assert "b" not in await store.ready_instances(at(1))

        await store.commit_episode("a", episode, at(1))

        assert len(await store.get_history("a")) == 2 + fan_out + 2
        assert (await store.get_instance("a")).output_json == '"out"'
        assert names(await store.fetch_messages("a", at(1))) == ["self"]
        assert names(await store.fetch_messages("b", at(1))) == ["to-b"]
        assert sorted(w.task_id for w in await store.pending_activities()) == list(range(fan_out))

    run_store(body)


def test_a_large_episode_then_small_ones_keep_one_history(run_store) -> None:
    async def body(store: Any) -> None:
        await started(store, "a", events=3)
        await store.fetch_messages("a", T0)
        await store.commit_episode("a", Episode(events=[event(n) for n in range(3, 250)]), T0)
        for n in range(250, 253):
            await store.send("a", raised(str(n)), T0)
            messages = await store.fetch_messages("a", T0)
            await store.commit_episode(
                "a", Episode(consumed=[i for i, _ in messages], events=[event(n)]), T0
            )

        history = await store.get_history("a")

        assert [e["EventId"] for e in history] == list(range(253))

    run_store(body)


def test_many_consumed_messages_are_deleted_with_the_commit(run_store) -> None:
    async def body(store: Any) -> None:
        await started(store, "a")
        for n in range(150):
            await store.send("a", raised(str(n)), T0)
        messages = await store.fetch_messages("a", T0)

        await store.commit_episode(
            "a", Episode(consumed=[i for i, _ in messages], events=[event(1)]), T0
        )

        assert len(messages) == 150
        assert await store.fetch_messages("a", T0) == []

    run_store(body)


def test_large_payloads_round_trip(run_store) -> None:
    big = json.dumps("x" * 200_000)

    async def body(store: Any) -> None:
        await store.create_instance(
            InstanceRecord("a", "orch", "Pending", input_json=big, created_at=T0, updated_at=T0),
            start_message(),
            NON_RUNNING,
        )
        messages = await store.fetch_messages("a", T0)
        large_event = {**event(0), "Result": big}
        await store.commit_episode(
            "a",
            Episode(
                consumed=[i for i, _ in messages],
                events=[large_event],
                replace_history=True,
                execution_id="e1",
                status="Completed",
                name="orch",
                input_json=big,
                output_json=big,
                outbox=[Outgoing("message", "b", {**raised("big"), "payload": big})],
            ),
            T0,
        )

        instance = await store.get_instance("a")
        assert (instance.input_json, instance.output_json) == (big, big)
        assert (await store.get_history("a"))[0]["Result"] == big
        assert (await store.fetch_messages("b", T0))[0][1]["payload"] == big

    run_store(body)


# --- activities --------------------------------------------------------------------------------


def test_an_activity_completes_exactly_once(run_store) -> None:
    async def body(store: Any) -> None:
        await started(store, "a")
        await store.fetch_messages("a", T0)
        [work] = await store.commit_episode(
            "a", Episode(events=[event(1)], outbox=[activity("a", 7)]), T0
        )
        result = {
            "kind": "event",
            "event": {"EventType": 5, "TaskScheduledId": 7},
            "execution_id": "e1",
        }

        dequeues = [await store.mark_activity_dequeued(work.work_id) for _ in range(2)]
        outcomes = await asyncio.gather(
            store.complete_activity(work.work_id, "a", result, T0),
            store.complete_activity(work.work_id, "a", result, T0),
        )
        again = await store.complete_activity(work.work_id, "a", result, T0)

        assert dequeues == [2, 3]  # created already handed to the committing engine
        assert sorted(outcomes) == [False, True]
        assert again is False
        assert len(await store.fetch_messages("a", T0)) == 1
        assert await store.mark_activity_dequeued(work.work_id) == 0
        assert await store.pending_activities() == []

    run_store(body)


def test_pending_activities_report_their_dequeue_count(run_store) -> None:
    async def body(store: Any) -> None:
        await started(store, "a")
        await store.fetch_messages("a", T0)
        works = await store.commit_episode(
            "a", Episode(events=[event(1)], outbox=[activity("a", 1), activity("a", 2)]), T0
        )
        await store.mark_activity_dequeued(works[1].work_id)

        pending = await store.pending_activities()

        assert [(w.task_id, w.dequeue_count, w.input_json) for w in pending] == [
            (1, 1, "1"),
            (2, 2, "2"),
        ]
        assert {w.instance_id for w in pending} == {"a"}

    run_store(body)


# --- entities ----------------------------------------------------------------------------------


def test_an_entity_batch_commits_state_consumption_and_responses(run_store) -> None:
    async def body(store: Any) -> None:
        entity_id = "@counter@k1"
        await store.send(entity_id, {"kind": "op", "request": {"op": "add", "id": "r1"}}, T0)
        messages = await store.fetch_messages(entity_id, T0)
        response = raised("r1")

        await store.commit_entity(
            EntityCommit(
                entity_id, [i for i, _ in messages], True, "5", [("caller", response)], at(3)
            )
        )

        entity = await store.get_instance(entity_id)
        assert (entity.entity_exists, entity.entity_state, entity.name) == (True, "5", "counter")
        assert await store.fetch_messages(entity_id, at(3)) == []
        assert names(await store.fetch_messages("caller", at(3))) == ["r1"]

        await store.fetch_messages(entity_id, at(4))
        await store.commit_entity(EntityCommit(entity_id, [], False, None, [], at(4)))
        deleted = await store.get_instance(entity_id)
        assert (deleted.entity_exists, deleted.entity_state) == (False, None)

    run_store(body)


# --- attempts, releases, status sends, rewinds ---------------------------------------------------


def test_attempts_count_until_a_commit_resets_them(run_store) -> None:
    async def body(store: Any) -> None:
        await store.send("a", start_message(), T0)
        counts = []
        for _ in range(3):
            await store.fetch_messages("a", T0)
            counts.append(await store.begin_attempt("a"))
        messages = await store.fetch_messages("a", T0)
        await store.commit_episode(
            "a",
            Episode(
                consumed=[i for i, _ in messages],
                events=[event(0)],
                replace_history=True,
                execution_id="e1",
                status="Running",
                name="orch",
            ),
            T0,
        )
        await store.send("a", raised("next"), T0)
        await store.fetch_messages("a", T0)

        assert counts == [1, 2, 3]
        assert await store.begin_attempt("a") == 1

    run_store(body)


def test_release_activity_undoes_one_dequeue(run_store) -> None:
    async def body(store: Any) -> None:
        await started(store, "a")
        await store.fetch_messages("a", T0)
        [work] = await store.commit_episode(
            "a", Episode(events=[event(1)], outbox=[activity("a", 1)]), T0
        )
        await store.mark_activity_dequeued(work.work_id)
        await store.mark_activity_dequeued(work.work_id)

        await store.release_activity(work.work_id)

        assert [w.dequeue_count for w in await store.pending_activities()] == [2]
        assert await store.mark_activity_dequeued(work.work_id) == 3

    run_store(body)


def test_send_with_a_status_sets_it_with_the_message(run_store) -> None:
    async def body(store: Any) -> None:
        await started(store, "a")
        await store.fetch_messages("a", T0)
        await store.commit_episode(
            "a", Episode(events=[event(1)], status="Failed", output_json='"x"'), T0
        )

        await store.send("a", {"kind": "rewind", "reason": "again"}, at(5), status="Pending")

        instance = await store.get_instance("a")
        assert (instance.status, instance.updated_at) == ("Pending", at(5))
        assert [m["kind"] for _, m in await store.fetch_messages("a", at(5))] == ["rewind"]

    run_store(body)


def test_a_rewrite_replaces_the_history_of_the_same_execution(run_store) -> None:
    async def body(store: Any) -> None:
        await started(store, "a", events=4)
        await store.fetch_messages("a", T0)
        await store.commit_episode(
            "a", Episode(events=[event(9)], status="Failed", output_json='"boom"'), T0
        )
        await store.fetch_messages("a", T0)

        await store.commit_episode(
            "a", Episode(events=[event(0), event(1)], rewrite_history=True, status="Running"), at(1)
        )

        assert [e["EventId"] for e in await store.get_history("a")] == [0, 1]
        instance = await store.get_instance("a")
        assert (instance.status, instance.output_json, instance.execution_id) == (
            "Running",
            None,
            "e1",
        )

    run_store(body)
