"""``commit_step``: activity results and the episode that took them, in one commit (both stores).

The engine commits an activity's result together with the episode it unblocks; the store
must apply all of it or nothing, refuse the whole step when a result was already reported
by another run, and keep a result the episode did not take in the inbox. Commits may also
count the next episode's attempt in advance (``count_next``), and a start its first
(``count_first``).
"""

from __future__ import annotations

from typing import Any

import pytest

from durable_host.core.orchestration import Episode, Outgoing
from durable_host.core.records import Completion
from durable_host.functions.config import NON_RUNNING
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


def result(task_id: int, name: str = "act") -> dict[str, Any]:
    event = {"EventType": 5, "EventId": -1, "TaskScheduledId": task_id, "Name": name}
    return {"kind": "event", "event": event, "execution_id": "e1"}


async def scheduled(store: Any, instance_id: str, tasks: int) -> list[Any]:
    """A running instance with ``tasks`` activity work items (handed, as the engine has them)."""
    await started(store, instance_id)
    await store.fetch_messages(instance_id, T0)
    episode = Episode(
        events=[event(n) for n in range(1, tasks + 1)],
        outbox=[activity(instance_id, n) for n in range(tasks)],
    )
    return sorted(await store.commit_episode(instance_id, episode, T0), key=lambda w: w.task_id)


def test_a_step_commits_the_results_and_their_episode_at_once(run_store) -> None:
    async def body(store: Any) -> None:
        works = await scheduled(store, "a", 2)
        await store.send("a", raised("go"), T0)
        messages = await store.fetch_messages("a", T0)
        episode = Episode(
            consumed=[i for i, _ in messages],
            events=[event(10), event(11)],
            outbox=[activity("a", 5), Outgoing("message", "b", raised("to-b"))],
        )
        completions = [Completion(w.work_id, result(w.task_id), consumed=True) for w in works]

        created = await store.commit_step("a", completions, episode, at(1))

        assert [w.task_id for w in created] == [5]
        assert [w.task_id for w in await store.pending_activities()] == [5]
        assert await store.fetch_messages("a", at(1)) == []  # the results went straight in
        assert names(await store.fetch_messages("b", at(1))) == ["to-b"]
        assert [e["EventId"] for e in await store.get_history("a")] == [0, 1, 2, 10, 11]
        assert (await store.get_instance("a")).updated_at == at(1)
        # Each result was reported once: a second report finds its work item gone.
        assert not await store.complete_activity(works[0].work_id, "a", result(0), at(2))

    run_store(body)


def test_a_result_the_episode_did_not_take_waits_in_the_inbox(run_store) -> None:
    async def body(store: Any) -> None:
        [work] = await scheduled(store, "a", 1)
        await store.send("a", raised("suspend"), T0)
        messages = await store.fetch_messages("a", T0)
        episode = Episode(consumed=[i for i, _ in messages], events=[event(9)], status="Suspended")

        created = await store.commit_step(
            "a", [Completion(work.work_id, result(0), consumed=False)], episode, at(1)
        )

        assert created == []
        assert await store.pending_activities() == []
        waiting = await store.fetch_messages("a", at(1))
        assert [m["event"]["TaskScheduledId"] for _, m in waiting] == [0]
        assert (await store.get_instance("a")).status == "Suspended"

    run_store(body)


def test_a_step_whose_result_another_run_reported_applies_nothing(run_store) -> None:
    async def body(store: Any) -> None:
        first, second = await scheduled(store, "a", 2)
        assert await store.complete_activity(first.work_id, "a", result(0), at(1))
        reported = await store.fetch_messages("a", at(1))
        completions = [
            Completion(first.work_id, result(0), consumed=True),
            Completion(second.work_id, result(1), consumed=True),
        ]
        episode = Episode(
            consumed=[i for i, _ in reported],
            events=[event(20)],
            status="Completed",
            outbox=[activity("a", 7)],
        )

        assert await store.commit_step("a", completions, episode, at(2)) is None

        assert [e["EventId"] for e in await store.get_history("a")] == [0, 1, 2]
        assert (await store.get_instance("a")).status == "Running"
        assert [w.task_id for w in await store.pending_activities()] == [1]
        assert [i for i, _ in await store.fetch_messages("a", at(2))] == [i for i, _ in reported]
        # The engine then completes the results one by one: only the second goes in.
        assert not await store.complete_activity(first.work_id, "a", result(0), at(2))
        assert await store.complete_activity(second.work_id, "a", result(1), at(2))
        assert len(await store.fetch_messages("a", at(2))) == 2

    run_store(body)


def test_a_step_that_fails_at_its_commit_leaves_the_work_item_and_nothing_else(
    run_store, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def body(store: Any) -> None:
        [work] = await scheduled(store, "a", 1)
        episode = Episode(
            events=[event(30)],
            outbox=[activity("a", 8), Outgoing("message", "b", raised("to-b"))],
        )
        completion = Completion(work.work_id, result(0), consumed=True)
        with monkeypatch.context() as patch:
            fail_at_commit(kind, store, patch)
            with pytest.raises(RuntimeError, match="injected"):
                await store.commit_step("a", [completion], episode, at(1))

        assert [w.task_id for w in await store.pending_activities()] == [0]
        assert len(await store.get_history("a")) == 2
        assert await store.fetch_messages("a", at(1)) == []
        assert await store.fetch_messages("b", at(1)) == []

        await store.commit_step("a", [completion], episode, at(1))

        assert [w.task_id for w in await store.pending_activities()] == [8]
        assert names(await store.fetch_messages("b", at(1))) == ["to-b"]

    run_store(body)


def test_a_commit_can_count_the_next_attempt_in_advance(run_store) -> None:
    async def body(store: Any) -> None:
        [work] = await scheduled(store, "a", 1)
        await store.send("a", raised("go"), T0)
        messages = await store.fetch_messages("a", T0)
        episode = Episode(consumed=[i for i, _ in messages], events=[event(3)])

        await store.commit_episode("a", episode, at(1), count_next=True)
        await store.fetch_messages("a", at(1))
        # The next episode is counted already: another attempt (after a crash) is the 2nd.
        assert await store.begin_attempt("a") == 2

        completion = Completion(work.work_id, result(0), consumed=True)
        await store.commit_step("a", [completion], Episode(events=[event(4)]), at(2))
        await store.fetch_messages("a", at(2))
        assert await store.begin_attempt("a") == 1

        await store.send("a", raised("again"), T0)
        messages = await store.fetch_messages("a", at(2))
        episode = Episode(consumed=[i for i, _ in messages], events=[event(5)])
        await store.commit_episode("a", episode, at(3), count_next=True)
        await store.send("a", raised("more"), T0)
        messages = await store.fetch_messages("a", at(3))
        await store.commit_episode(
            "a", Episode(consumed=[i for i, _ in messages], events=[event(6)]), at(4)
        )
        await store.fetch_messages("a", at(4))
        assert await store.begin_attempt("a") == 1

    run_store(body)


def test_a_start_can_count_its_first_attempt_and_name_its_message(kind, run_store) -> None:
    async def body(store: Any) -> None:
        handed = await store.create_instance(
            record("a"), start_message(), NON_RUNNING, count_first=True
        )
        plain = await store.create_instance(record("b"), start_message(), NON_RUNNING)

        [(message_id, message)] = await store.fetch_messages("a", T0)
        assert plain is None
        if kind == "azure":
            # Another host may take the instance: its first episode reads and counts.
            assert handed is None
            assert await store.begin_attempt("a") == 1
            return
        assert handed == message_id and message == start_message()
        # The first episode is counted already: another attempt (after a crash) is the 2nd.
        assert await store.begin_attempt("a") == 2
        assert await store.begin_attempt("b") == 1
        await store.commit_episode("a", Episode(consumed=[handed], events=[event(0)]), at(1))
        assert await store.fetch_messages("a", at(1)) == []
        assert await store.begin_attempt("a") == 1

    run_store(body)


def test_an_attempt_counted_in_advance_can_be_given_back(run_store) -> None:
    async def body(store: Any) -> None:
        await scheduled(store, "a", 1)
        await store.send("a", raised("go"), T0)
        messages = await store.fetch_messages("a", T0)
        episode = Episode(consumed=[i for i, _ in messages], events=[event(3)])
        await store.commit_episode("a", episode, at(1), count_next=True)

        await store.release_attempt("a")  # a graceful stop: that episode never began
        await store.release_attempt("a")  # nothing left to give back: stays at 0

        await store.fetch_messages("a", at(1))
        assert await store.begin_attempt("a") == 1

    run_store(body)


def test_a_fan_in_of_many_results_commits_in_one_step(run_store) -> None:
    async def body(store: Any) -> None:
        count = min(100, store.max_step_completions)
        works = await scheduled(store, "a", count)
        completions = [Completion(w.work_id, result(w.task_id), consumed=True) for w in works]
        episode = Episode(
            events=[event(1000 + n) for n in range(count)], status="Completed", output_json="1"
        )

        assert await store.commit_step("a", completions, episode, at(1)) == []

        assert await store.pending_activities() == []
        assert len(await store.get_history("a")) == 1 + count + count
        assert (await store.get_instance("a")).status == "Completed"

    run_store(body)
