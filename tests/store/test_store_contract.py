"""The Store port's contract, one suite for every implementation (SQLite and Azure Storage).

Each test drives the port directly with hand-made episodes, as the engine would: fetch the
inbox, commit an episode, read back. Times are passed in (``now``), never slept for.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from durable_host.config import ANY_STATE, NON_RUNNING
from durable_host.orchestration import Episode, Outgoing
from durable_host.store.base import EntityCommit, InstanceExistsError, InstanceRecord, Query

T0 = "2026-01-01T00:00:00.000000Z"


def at(seconds: int) -> str:
    return f"2026-01-01T00:{seconds // 60:02d}:{seconds % 60:02d}.000000Z"


def record(instance_id: str, created: str = T0, status: str = "Pending") -> InstanceRecord:
    return InstanceRecord(
        instance_id=instance_id,
        name="orch",
        status=status,
        input_json='"in"',
        created_at=created,
        updated_at=created,
    )


def start_message(name: str = "orch") -> dict[str, Any]:
    return {
        "kind": "start",
        "event": {"EventType": 0, "EventId": -1, "Name": name, "Timestamp": T0},
    }


def event(n: int, kind: int = 4) -> dict[str, Any]:
    return {"EventType": kind, "EventId": n, "Name": "act", "Timestamp": T0, "IsPlayed": False}


def raised(name: str) -> dict[str, Any]:
    return {
        "kind": "event",
        "event": {"EventType": 14, "EventId": -1, "Name": name, "Timestamp": T0},
    }


def activity(instance_id: str, task_id: int) -> Outgoing:
    payload = {
        "instance_id": instance_id,
        "execution_id": "e1",
        "task_id": task_id,
        "name": "act",
        "input_json": json.dumps(task_id),
    }
    return Outgoing("activity", instance_id, payload)


async def started(store: Any, instance_id: str, *, events: int = 1, created: str = T0) -> None:
    """Create an instance and commit its first episode: Running, ``events`` history events."""
    await store.create_instance(record(instance_id, created), start_message(), NON_RUNNING)
    messages = await store.fetch_messages(instance_id, created)
    await store.commit_episode(
        instance_id,
        Episode(
            consumed=[i for i, _ in messages],
            events=[event(n) for n in range(events)],
            replace_history=True,
            execution_id="e1",
            status="Running",
            name="orch",
            input_json='"in"',
        ),
        created,
    )


def names(messages: list[tuple[int, dict[str, Any]]]) -> list[str]:
    return [m["event"]["Name"] for _, m in messages]


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


def fail_at_commit(kind: str, store: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the next commit fail after it has written part of its work."""
    if kind == "sqlite":
        from durable_host.store import sqlite

        original = sqlite.write_outbox

        def write_then_fail(db: Any, episode: Episode) -> Any:
            original(db, episode)  # history, status and outbox are written in the transaction
            raise RuntimeError("injected failure before the commit")

        monkeypatch.setattr(sqlite, "write_outbox", write_then_fail)
        return
    if kind == "postgres":
        from tests.store.conftest import fail_postgres_commit

        fail_postgres_commit(monkeypatch)
        return

    async def refuse(commit: Any, ops: Any) -> None:
        raise RuntimeError("injected failure at the commit point, after staging")

    monkeypatch.setattr(store.commits, "commit_point", refuse)


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


# --- queries and purge -------------------------------------------------------------------------


async def populated(store: Any) -> None:
    for n, instance_id in enumerate(["job-1", "job-2", "job-3", "other"]):
        await started(store, instance_id, created=at(n))
    await store.fetch_messages("job-2", at(10))
    await store.commit_episode("job-2", Episode(events=[event(5)], status="Completed"), at(10))
    await store.send("@counter@k", {"kind": "op", "request": {"op": "add", "id": "r"}}, T0)
    messages = await store.fetch_messages("@counter@k", T0)
    await store.commit_entity(
        EntityCommit("@counter@k", [i for i, _ in messages], True, "1", [], T0)
    )


def ids(page: Any) -> list[str]:
    return [r.instance_id for r in page.records]


def test_query_filters_by_status_time_prefix_and_kind(run_store) -> None:
    async def body(store: Any) -> None:
        await populated(store)

        assert ids(await store.query(Query())) == ["job-1", "job-2", "job-3", "other"]
        assert ids(await store.query(Query(statuses=("Completed",)))) == ["job-2"]
        assert ids(await store.query(Query(statuses=("Running", "Completed"), prefix="job"))) == [
            "job-1",
            "job-2",
            "job-3",
        ]
        assert ids(await store.query(Query(created_from=at(1), created_to=at(2)))) == [
            "job-2",
            "job-3",
        ]
        assert ids(await store.query(Query(updated_from=at(10)))) == ["job-2"]
        assert ids(await store.query(Query(entities=True))) == ["@counter@k"]
        assert len((await store.query(Query(entities=None))).records) == 5

    run_store(body)


PREFIXED = [
    "s/a:turn:1",
    "s/a:turn:1:run",
    "s/a:turn:10",
    "s/a:turn:2",
    "s/a:turn;x",  # the character after ':' - just above the range of "s/a:turn:"
    "s/a:turn\U0001f600",  # an astral character after the prefix
    "s/b:turn:1",
    "s%a:turn:1",  # '%' is how the Azure keys escape '/'
    "s/a:tur\ud7ff",  # a last character from which no bound is taken
    "s/a:tur\ud7ffz",
]


@pytest.mark.parametrize(
    "prefix",
    ["s/a:turn:", "s/a:turn:1", "s/a:turn", "s/", "s%", "s/a:tur\ud7ff", "z", "s/a:turn\U0001f600"],
)
def test_a_prefix_query_returns_exactly_the_ids_with_the_prefix(run_store, prefix) -> None:
    # Prefix queries run as key ranges (store codec ``prefix_bound``): nothing may fall out of
    # the range or into it, whatever the ids' characters or the stores' escaping.
    async def body(store: Any) -> None:
        for n, instance_id in enumerate(PREFIXED):
            await started(store, instance_id, created=at(n))

        found = ids(await store.query(Query(prefix=prefix)))

        assert found == sorted(i for i in PREFIXED if i.startswith(prefix))

    run_store(body)


def test_query_pages_with_top_and_continuation(run_store) -> None:
    async def body(store: Any) -> None:
        await populated(store)

        first = await store.query(Query(top=3))
        second = await store.query(Query(top=3, continuation=first.continuation))

        assert (ids(first), first.continuation) == (["job-1", "job-2", "job-3"], "job-3")
        assert (ids(second), second.continuation) == (["other"], None)

    run_store(body)


def test_purge_removes_the_instance_its_history_inbox_and_work(run_store) -> None:
    async def body(store: Any) -> None:
        await started(store, "a", events=3)
        await store.fetch_messages("a", T0)
        await store.commit_episode("a", Episode(events=[event(1)], outbox=[activity("a", 1)]), T0)
        await store.send("a", raised("late"), T0)
        await started(store, "b")

        assert await store.purge("a") == 1
        assert await store.purge("a") == 0

        assert await store.get_instance("a") is None
        assert await store.get_history("a") == []
        assert await store.fetch_messages("a", T0) == []
        assert await store.pending_activities() == []
        assert (await store.get_instance("b")).status == "Running"

    run_store(body)


def test_purge_many_removes_only_the_terminal_instances_the_query_matches(run_store) -> None:
    async def body(store: Any) -> None:
        await populated(store)
        await store.fetch_messages("other", at(11))
        await store.commit_episode("other", Episode(events=[event(5)], status="Failed"), at(11))

        assert await store.purge_many(Query(statuses=("Running",), prefix="job")) == 0
        assert await store.purge_many(Query(created_from=at(0), prefix="job")) == 1
        assert ids(await store.query(Query())) == ["job-1", "job-3", "other"]
        assert await store.purge_many(Query(created_from=at(0), entities=None)) == 1
        assert ids(await store.query(Query(entities=None))) == ["@counter@k", "job-1", "job-3"]

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


# --- host secrets ------------------------------------------------------------------------------


def test_a_secret_is_written_only_over_the_value_the_writer_read(run_store) -> None:
    async def body(store: Any) -> None:
        assert await store.get_secret("keys") is None

        assert await store.swap_secret("keys", None, "one") is True
        assert await store.swap_secret("keys", None, "two") is False
        assert await store.swap_secret("keys", "stale", "two") is False
        assert await store.get_secret("keys") == "one"
        assert await store.swap_secret("keys", "one", "two") is True

        assert await store.get_secret("keys") == "two"
        assert await store.get_secret("other") is None

    run_store(body)


def test_a_store_opened_read_only_beside_the_owner_shares_its_secrets(
    kind: str, tmp_path: Any, request: pytest.FixtureRequest
) -> None:
    import uuid

    from tests.store.conftest import open_kind

    hub = "S" + uuid.uuid4().hex[:12]

    def read_only() -> Any:
        return open_kind(kind, tmp_path, request, hub, read_only=True)

    async def main() -> None:
        tool = read_only()
        await tool.open()  # before any owner: a fresh hub
        try:
            assert await tool.swap_secret("keys", None, "from the tool") is True
            owner = open_kind(kind, tmp_path, request, hub)
            await owner.open()
            try:
                assert await owner.get_secret("keys") == "from the tool"
                assert await owner.swap_secret("keys", "from the tool", "rotated") is True
                assert await tool.get_secret("keys") == "rotated"
            finally:
                await owner.close()
        finally:
            await tool.close()

    asyncio.run(main())


def test_ready_instances_come_in_arrival_order_not_id_order(run_store) -> None:
    async def body(store: Any) -> None:
        for instance_id in ("zulu", "alpha", "mike"):
            await store.create_instance(record(instance_id), start_message(), NON_RUNNING)
        await store.send("alpha", raised("later"), T0)  # a newer message changes nothing

        assert await store.ready_instances(T0) == ["zulu", "alpha", "mike"]

    run_store(body)


# --- timer-trigger schedules ---------------------------------------------------------------


def test_a_schedule_occurrence_is_claimed_by_exactly_one_writer(run_store) -> None:
    async def body(store) -> None:
        assert await store.get_schedule("tick") is None
        claims = await asyncio.gather(
            *(store.swap_schedule("tick", None, f"claim-{n}") for n in range(4))
        )
        assert claims.count(True) == 1
        winner = f"claim-{claims.index(True)}"
        assert await store.get_schedule("tick") == winner
        assert await store.swap_schedule("tick", "stale", "next") is False
        assert await store.swap_schedule("tick", winner, "next") is True
        assert await store.get_schedule("tick") == "next"
        assert await store.get_schedule("other") is None
        assert await store.get_secret("tick") is None  # schedules and secrets never mix

    run_store(body)
