"""Unit tests of the host's parity and operation pieces: the history view, quarantines,
the store's poison support, scheduled starts and the history cache, without a host process.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter
from pathlib import Path
from typing import Any

import azure.durable_functions as df
import azure.functions as func
import pytest

from durable_host.core import entity, replay
from durable_host.core import history as h
from durable_host.core import orchestration as o
from durable_host.core.records import MessageKind
from durable_host.engine.client import DurableClient, transform_history
from durable_host.engine.loops import Engine
from durable_host.functions import config as config_mod
from durable_host.functions import loader, sdk_codec
from durable_host.store.base import CorruptHistoryError, InstanceRecord
from durable_host.store.sqlite.store import SqliteStore
from tests.unit.durable_host.driver import Driver, handle_of

T0 = "2026-01-01T00:00:00.000000Z"
T1 = "2026-01-01T00:00:01.000000Z"

# --- the history view ---------------------------------------------------------------------


def test_history_view_merges_scheduling_into_outcomes_and_keeps_pending_steps():
    events = [
        h.orchestrator_started(T0),
        h.execution_started(
            at=T0, name="orch", instance_id="i", execution_id="e", input_json='"x"', version="1"
        ),
        h.task_scheduled(0, T0, "done_step", '"a"'),
        h.task_scheduled(1, T0, "pending_step", '"b"'),
        h.sub_orchestration_created(2, T0, "child", "kid", "null", None),
        h.timer_created(3, T0, T1),
        h.event_sent(4, T0, "@counter@k", "get", '{"id": "r1"}'),
        h.orchestrator_completed(T0),
        h.orchestrator_started(T1),
        h.task_completed(0, T1, '{"v":1}'),
        h.sub_orchestration_completed(2, T1, '"kid done"'),
        h.timer_fired(3, T1, T1),
        h.event_raised(T1, "approve", '"yes"'),
        h.generic_event(T1, "Rewound: TaskFailed 9"),
        h.execution_terminated(T1, "stop"),
    ]

    view = transform_history(events, with_output=True)

    assert [e["EventType"] for e in view] == [
        "ExecutionStarted",
        "TaskScheduled",
        "TimerCreated",
        "EventSent",
        "TaskCompleted",
        "SubOrchestrationInstanceCompleted",
        "TimerFired",
        "EventRaised",
        "GenericEvent",
        "ExecutionTerminated",
    ]
    started, pending, timer, sent, done, child, fired, raised, generic, terminated = view
    assert started["FunctionName"] == "orch" and not {
        "Name",
        "Input",
        "Version",
        "OrchestrationInstance",
    } & set(started)
    assert pending["Name"] == "pending_step" and "Input" not in pending and "Version" not in pending
    assert timer["FireAt"] == T1 and "EventId" not in timer
    assert sent["InstanceId"] == "@counter@k" and sent["Input"] == '{"id": "r1"}'
    assert done == {
        "EventType": "TaskCompleted",
        "Timestamp": T1,
        "Result": {"v": 1},
        "ScheduledTime": T0,
        "FunctionName": "done_step",
    }
    assert child["FunctionName"] == "child" and child["Result"] == "kid done"
    assert "TimerId" not in fired and "Input" not in raised and "Input" not in terminated
    assert generic["Data"] == "Rewound: TaskFailed 9"


def test_history_view_hides_results_unless_asked():
    events = [
        h.task_scheduled(0, T0, "a", "1"),
        h.task_completed(0, T1, "5"),
        h.execution_completed(T1, "Completed", "5"),
    ]

    view = transform_history(events, with_output=False)

    assert all("Result" not in e for e in view)


# --- quarantines (pure) ---------------------------------------------------------------------


def two_steps(context: df.DurableOrchestrationContext):
    yield context.call_activity("a", 1)
    return (yield context.call_activity("b", 2))


def test_a_poison_episode_fails_the_instance_without_running_its_code_and_tells_the_parent():
    ran = []

    def orch(context):
        ran.append(context.is_replaying)
        yield context.call_activity("a", 1)

    d = Driver(handle_of(orch))
    parent = {
        "Name": "p",
        "Version": "",
        "TaskScheduleId": 3,
        "OrchestrationInstance": {"InstanceId": "p1", "ExecutionId": "pe"},
    }
    start = h.execution_started(
        at=T0,
        name="orch",
        instance_id="i1",
        execution_id="",
        input_json=None,
        version="",
        parent=parent,
    )
    d.deliver({"kind": "start", "event": start})
    ran.clear()
    view = o.InstanceView(d.instance_id, d.status, d.execution_id, list(d.history), d.name)
    message = {
        "kind": "event",
        "event": h.task_completed(0, T1, "1"),
        "execution_id": d.execution_id,
    }

    episode = o.run_episode(
        d.handle, view, [(7, message)], T1, "x", poison="quarantined as poison after 5 attempts"
    )

    assert ran == [] and episode.status == "Failed" and episode.consumed == [7]
    assert (
        json.loads(episode.output_json)
        == "Orchestrator function 'orch' failed: quarantined as poison after 5 attempts"
    )
    [note] = [m for m in episode.outbox if m.target == "p1"]
    assert note.payload["event"]["EventType"] == h.EventType.SUB_ORCHESTRATION_FAILED


def test_an_undecodable_message_fails_a_running_instance_and_is_dropped_for_a_finished_one():
    d = Driver(handle_of(two_steps))
    d.start()

    episode = d.deliver({"kind": "undecodable", "error": "Expecting value", "text": "{bad"})
    later = d.deliver({"kind": "undecodable", "error": "again", "text": "??"})

    assert (
        d.status == "Failed"
        and "inbox message 0 could not be decoded (Expecting value)" in d.output
    )
    assert episode.consumed == [0]
    assert later.consumed == [0] and later.events == [] and later.status is None


def test_unreadable_history_fails_with_the_reason():
    episode = o.unreadable_history_episode(
        "orch", [3, 1], "history event 2 of instance 'i' could not be decoded (x)", T1
    )

    assert episode.status == "Failed" and episode.consumed == [1, 3]
    assert [e["EventType"] for e in episode.events] == [
        h.EventType.ORCHESTRATOR_STARTED,
        h.EventType.EXECUTION_COMPLETED,
        h.EventType.ORCHESTRATOR_COMPLETED,
    ]
    assert "quarantined: history event 2" in json.loads(episode.output_json)


def test_a_poison_entity_batch_fails_each_operation_and_keeps_the_state():
    def counter(context):
        raise AssertionError("the entity's code must not run")

    ops = [
        (
            i,
            {
                "kind": "op",
                "request": {
                    "id": f"r{i}",
                    "op": "add",
                    "input": "1",
                    "parent": "caller",
                    "parentExecution": "e",
                },
            },
        )
        for i in range(2)
    ]
    ops.append((2, {"kind": "undecodable", "error": "bad", "text": "x"}))

    commit = entity.run_batch(
        df.Entity.create(counter), "@counter@k", True, "41", ops, T0, poison="quarantined as poison"
    )

    assert commit.state_json == "41" and commit.exists and commit.consumed == [0, 1, 2]
    assert len(commit.responses) == 2
    for _, message in commit.responses:
        response = json.loads(message["event"]["Input"])
        assert response["exceptionType"] == "Error" and "quarantined as poison" in json.loads(
            response["result"]
        )


# --- the SQLite store's poison support ----------------------------------------------------------


def store_test(tmp_path: Path, body) -> None:
    async def run() -> None:
        store = SqliteStore(tmp_path / "hub.db")
        await store.open()
        try:
            await body(store)
        finally:
            await store.close()

    asyncio.run(run())


def record(instance_id: str) -> InstanceRecord:
    return InstanceRecord(
        instance_id=instance_id, name="orch", status="Pending", created_at=T0, updated_at=T0
    )


def test_attempts_count_up_until_a_commit_resets_them(tmp_path):
    async def body(store: SqliteStore) -> None:
        assert [await store.begin_attempt("a") for _ in range(3)] == [1, 2, 3]
        assert await store.begin_attempt("b") == 1
        await store.commit_episode("a", o.Episode(), T0)
        assert await store.begin_attempt("a") == 1

    store_test(tmp_path, body)


def test_undecodable_rows_come_back_as_undecodable_messages_and_bad_history_raises(tmp_path):
    async def body(store: SqliteStore) -> None:
        await store.create_instance(
            record("a"), {"kind": "start", "event": {"Name": "orch"}}, ("Completed",)
        )
        await store.commit_episode("a", o.Episode(events=[h.orchestrator_started(T0)]), T0)

        def corrupt(db) -> None:
            db.execute("INSERT INTO inbox (instance_id, message) VALUES ('a', '{oops')")
            db.execute("INSERT INTO inbox (instance_id, message) VALUES ('a', '[1]')")
            db.execute("UPDATE history SET event='nope' WHERE instance_id='a' AND seq=0")

        await store._run(corrupt)
        messages = await store.fetch_messages("a", T1)
        kinds = [m["kind"] for _, m in messages]
        assert kinds == ["start", "undecodable", "undecodable"]
        assert messages[1][1]["text"] == "{oops"
        with pytest.raises(CorruptHistoryError, match="history event 0 of instance 'a'"):
            await store.get_history("a")

    store_test(tmp_path, body)


def test_send_with_a_status_and_a_rewritten_history(tmp_path):
    async def body(store: SqliteStore) -> None:
        await store.create_instance(
            record("a"), {"kind": "start", "event": {"Name": "orch"}}, ("Completed",)
        )
        failed = o.Episode(
            events=[h.orchestrator_started(T0)] * 3, status="Failed", output_json='"boom"'
        )
        await store.commit_episode("a", failed, T0)
        await store.send("a", {"kind": "rewind"}, T1, status="Pending")
        assert (await store.get_instance("a")).status == "Pending"

        rewound = o.Episode(
            events=[h.generic_event(T1, "x")], status="Running", rewrite_history=True
        )
        await store.commit_episode("a", rewound, T1)

        after = await store.get_instance("a")
        assert after.status == "Running" and after.output_json is None and after.updated_at == T1
        assert [e["EventType"] for e in await store.get_history("a")] == [h.EventType.GENERIC]

    store_test(tmp_path, body)


def test_a_released_activity_does_not_count_as_a_run(tmp_path):
    async def body(store: SqliteStore) -> None:
        activity = o.Outgoing(
            "activity",
            "a",
            {"instance_id": "a", "execution_id": "e", "task_id": 0, "name": "x", "input_json": "1"},
        )
        [work] = await store.commit_episode("a", o.Episode(outbox=[activity]), T0)
        assert work.dequeue_count == 1  # handed to the committing engine at creation
        await store.release_activity(work.work_id)
        assert await store.mark_activity_dequeued(work.work_id) == 1

    store_test(tmp_path, body)


# --- an in-process engine: scheduled starts, the history cache ------------------------------------

app = df.DFApp(http_auth_level=func.AuthLevel.ANONYMOUS)


@app.activity_trigger(input_name="value")
def echo(value):
    return value


@app.orchestration_trigger(context_name="context")
def steps(context: df.DurableOrchestrationContext):
    first = yield context.call_activity("echo", 1)
    return [first, (yield context.call_activity("echo", 2))]


@app.orchestration_trigger(context_name="context")
def waits(context: df.DurableOrchestrationContext):
    return (yield context.wait_for_external_event("go"))


INDEX = loader.index_functions(app)


async def until(probe, seconds: float = 10.0):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while loop.time() < deadline:
        value = await probe()
        if value:
            return value
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached")


def engine_test(tmp_path: Path, body, *, poison_attempts: int = 2, workers: bool = True) -> None:
    """Run ``body(engine, client)`` against an engine on a fresh SQLite store; without
    ``workers`` the body runs episodes itself (``Engine._process``), as a worker would."""

    async def run() -> None:
        store = SqliteStore(tmp_path / "hub.db")
        await store.open()
        config = config_mod.HostConfig(app_dir=tmp_path)
        engine = Engine(INDEX, store, config, fast_replay=True, poison_attempts=poison_attempts)
        if workers:
            await engine.start()
        else:
            replay.install(True)
            sdk_codec.install(True)
        try:
            await body(engine, DurableClient(engine))
        finally:
            await engine.stop(1.0)
            await store.close()
            replay.install(False)

    asyncio.run(run())


def test_a_scheduled_start_waits_for_its_time(tmp_path):
    async def body(engine: Engine, client: DurableClient) -> None:
        later = h.format_time(h.parse_time(engine.now()).replace(year=2099))
        await client.start("steps", "later", None, scheduled_start=later)
        await client.start("steps", "now", None, scheduled_start=engine.now())

        done = await until(lambda: _finished(engine, "now"))
        waiting = await engine.store.get_instance("later")

        assert done.output_json == "[1,2]"
        assert waiting.status == "Pending" and await engine.store.next_due(engine.now()) == later
        assert "later" not in await engine.store.ready_instances(engine.now())

    engine_test(tmp_path, body)


def test_the_history_cache_serves_hot_instances_and_forgets_finished_ones(tmp_path):
    async def body(engine: Engine, client: DurableClient) -> None:
        await client.start("steps", "hot", None)

        await until(lambda: _finished(engine, "hot"))
        cache = engine.metrics()["history_cache"]

        assert cache["hits"] >= 2  # each activity result found the history in memory
        assert cache["instances"] == 0 and cache["events"] == 0  # finished: forgotten

    engine_test(tmp_path, body)


async def _finished(engine: Engine, instance_id: str):
    record = await engine.store.get_instance(instance_id)
    return record if record and record.status in ("Completed", "Failed") else None


def reads_and_counts(store: SqliteStore) -> Counter[str]:
    """Count the store calls a start's first episode takes from memory when it can."""
    calls: Counter[str] = Counter()
    for name in ("fetch_messages", "begin_attempt", "get_history"):
        original = getattr(store, name)

        def counted(*args: Any, _name: str = name, _original: Any = original) -> Any:
            calls[_name] += 1
            return _original(*args)

        setattr(store, name, counted)
    return calls


@pytest.mark.parametrize(
    ("attempts", "expected"),
    [
        # The start counts the first attempt and names its message's inbox row: no episode
        # of the instance reads the inbox, counts an attempt or reads a history.
        (2, Counter()),
        # An attempt counted in advance and a crash before the episode would quarantine an
        # instance that never ran: the start counts nothing, each episode for itself, and
        # the first reads the inbox and the history as any episode does.
        (1, Counter(fetch_messages=1, begin_attempt=3, get_history=1)),
    ],
)
def test_a_start_hands_its_message_to_the_first_episode(tmp_path, attempts, expected):
    async def body(engine: Engine, client: DurableClient) -> None:
        calls = reads_and_counts(engine.store)
        await client.start("steps", "i", None)

        done = await until(lambda: _finished(engine, "i"))

        assert done.output_json == "[1,2]"
        assert calls == expected

    engine_test(tmp_path, body, poison_attempts=attempts)


@pytest.mark.parametrize("told", [False, True])
def test_news_after_a_start_makes_the_first_episode_read_the_inbox(tmp_path, told):
    # Told: an event raised through the client (the engine is notified). Not told: a
    # message with a status write the engine never heard of. Either way the handed start is
    # no longer all there is to know.
    async def body(engine: Engine, client: DurableClient) -> None:
        await client.start("waits", "i", None)
        if told:
            await client.raise_event("i", "go", json.dumps("news"))
        else:
            go = h.event_raised(engine.now(), "go", json.dumps("news"))
            message = {"kind": MessageKind.EVENT, "event": go}
            await engine.store.send("i", message, engine.now(), status="Pending")
        calls = reads_and_counts(engine.store)

        await engine._process("i")

        assert calls["fetch_messages"] == 1
        assert (await _finished(engine, "i")).output_json == '"news"'

    engine_test(tmp_path, body, workers=False)


def test_with_sessions_on_later_steps_continue_the_live_orchestration(tmp_path):
    async def body(engine: Engine, client: DurableClient) -> None:
        engine.set_fast_replay(True, with_sessions=True)
        engine.session_verify = 0  # no full replays on schedule: every step may continue
        await client.start("steps", "live", None)

        done = await until(lambda: _finished(engine, "live"))

        assert done.output_json == "[1,2]"
        assert engine.stats.get("session_steps") == 2  # both activity results, no replay

    engine_test(tmp_path, body)


def test_events_waiting_for_a_suspended_instance_are_not_counted_as_attempts(tmp_path):
    async def body(engine: Engine, client: DurableClient) -> None:
        await client.start("waits", "held", None)
        await until(lambda: _status(engine, "held", "Running"))
        await client.suspend("held", "pause")
        await until(lambda: _status(engine, "held", "Suspended"))
        for value in range(4):  # more than the two attempts allowed
            await client.raise_event("held", "go", json.dumps(value))
            await asyncio.sleep(0.05)

        await client.resume("held", "go on")
        done = await until(lambda: _finished(engine, "held"))

        assert done.status == "Completed" and done.output_json == "0"

    engine_test(tmp_path, body)


async def _status(engine: Engine, instance_id: str, status: str):
    record = await engine.store.get_instance(instance_id)
    return record if record and record.status == status else None


# --- structured logs ---------------------------------------------------------------------------


def test_log_records_name_their_instance_in_text_and_json():
    from durable_host.ops import logs

    record = logging.LogRecord("app", logging.INFO, __file__, 1, "step %d", (3,), None)
    token = logs.instance.set("order-17")
    try:
        logs.InstanceFilter().filter(record)
    finally:
        logs.instance.reset(token)

    text = logging.Formatter(logs.TEXT_FORMAT).format(record)
    payload = json.loads(logs.JsonFormatter().format(record))
    assert text.endswith("INFO app [order-17] step 3")
    assert payload["instance_id"] == "order-17" and payload["message"] == "step 3"
