"""Golden-history tests: the host's episodes against the real SDK handle.

Each test builds the history the Durable extension would write and checks event ids,
scheduling order, completion and failure exactly (protocol reference §1.4, §2.5).
"""

from __future__ import annotations

import json
from datetime import timedelta

import azure.durable_functions as df
import pytest

from durable_host.core import history as h
from durable_host.core.history import EventType as E
from tests.unit.durable_host.driver import Driver, handle_of

TS, TC, TF, TIMER, SUB, SENT = (
    E.TASK_SCHEDULED,
    E.TASK_COMPLETED,
    E.TASK_FAILED,
    E.TIMER_CREATED,
    E.SUB_ORCHESTRATION_CREATED,
    E.EVENT_SENT,
)


def chain(context: df.DurableOrchestrationContext):
    a = yield context.call_activity("say", "Tokyo")
    b = yield context.call_activity("say", "Seattle")
    return [a, b]


def test_first_episode_schedules_one_activity_with_the_extension_shapes():
    d = Driver(handle_of(chain))

    d.start("x")

    assert [e["EventType"] for e in d.history] == [
        E.ORCHESTRATOR_STARTED,
        E.EXECUTION_STARTED,
        TS,
        E.ORCHESTRATOR_COMPLETED,
    ]
    scheduled = d.history[2]
    assert scheduled["EventId"] == 0 and scheduled["Name"] == "say"
    assert scheduled["Input"] == json.dumps(['"Tokyo"'])  # input wrapped in a one-element array
    assert d.activities == [
        {
            "instance_id": "i1",
            "execution_id": "exec0",
            "task_id": 0,
            "name": "say",
            "input_json": '"Tokyo"',
        }
    ]
    assert d.status == "Running"


def test_chain_completes_with_output_and_ids_in_order():
    d = Driver(handle_of(chain))
    d.start()

    d.complete(0, "Hello Tokyo")
    d.complete(1, "Hello Seattle")

    assert d.status == "Completed"
    assert d.output == ["Hello Tokyo", "Hello Seattle"]
    assert d.scheduled() == [(TS, 0, "say"), (TS, 1, "say")]
    assert d.history[-2]["EventType"] == E.EXECUTION_COMPLETED


def test_each_episode_starts_with_exactly_one_orchestrator_started():
    d = Driver(handle_of(chain))
    d.start()
    d.complete(0, "a")
    d.complete(1, "b")

    starts = [i for i, e in enumerate(d.history) if e["EventType"] == E.ORCHESTRATOR_STARTED]

    assert len(starts) == 3


def test_duplicate_completion_is_dropped():
    d = Driver(handle_of(chain))
    d.start()
    d.complete(0, "a")

    episode = d.complete(0, "a again")

    assert episode.consumed == [0]
    assert [e["EventType"] for e in episode.events] == []
    assert d.status == "Running"


def fan_out(context: df.DurableOrchestrationContext):
    results = yield context.task_all([context.call_activity("double", i) for i in range(3)])
    return sum(results)


def test_fan_out_schedules_all_children_and_completes_after_the_last():
    d = Driver(handle_of(fan_out))
    d.start()
    assert d.scheduled() == [(TS, 0, "double"), (TS, 1, "double"), (TS, 2, "double")]

    d.complete(2, 4)
    d.complete(0, 0)
    assert d.status == "Running"
    d.complete(1, 2)

    assert d.status == "Completed" and d.output == 6


def retrying(context: df.DurableOrchestrationContext):
    options = df.RetryOptions(first_retry_interval_in_milliseconds=1000, max_number_of_attempts=3)
    value = yield context.call_activity_with_retry("flaky", options, "k")
    after = yield context.call_activity("say", value)
    return after


def test_retry_takes_one_id_per_attempt_and_one_timer_id_per_failure():
    d = Driver(handle_of(retrying))
    d.start()

    d.fail(0, "first")
    assert d.scheduled()[-1] == (TIMER, 1, None)
    timer = d.history[-2]
    assert h.parse_time(timer["FireAt"]) - h.parse_time(d.now) == timedelta(seconds=1)
    assert [m.visible_at for m in d.messages] == [timer["FireAt"]]
    d.fire(1)
    d.fail(2, "second")
    d.fire(3)
    d.complete(4, "finally")
    d.complete(5, "done")

    assert d.scheduled() == [
        (TS, 0, "flaky"),
        (TIMER, 1, None),
        (TS, 2, "flaky"),
        (TIMER, 3, None),
        (TS, 4, "flaky"),
        (TS, 5, "say"),
    ]
    assert d.status == "Completed" and d.output == "done"


def retry_then_catch(context: df.DurableOrchestrationContext):
    options = df.RetryOptions(first_retry_interval_in_milliseconds=10, max_number_of_attempts=2)
    try:
        yield context.call_activity_with_retry("fail", options, None)
    except Exception as exc:  # noqa: BLE001 - the SDK's failed-task error is a plain Exception
        return str(exc).split(" \n ")[0]


def test_exhausted_retry_waits_one_more_timer_before_the_failure_reaches_the_code():
    d = Driver(handle_of(retry_then_catch))
    d.start()
    d.fail(0, "a", "fail")
    d.fire(1)
    d.fail(2, "b", "fail")
    assert d.status == "Running"  # DTFx's retry interceptor still waits after the last failure
    assert d.scheduled()[-1] == (TIMER, 3, None)

    d.fire(3)

    assert d.status == "Completed"
    assert d.output == "Activity function 'fail' failed: b"


def approval(context: df.DurableOrchestrationContext):
    timer = context.create_timer(context.current_utc_datetime + timedelta(hours=1))
    event = context.wait_for_external_event("approve")
    winner = yield context.task_any([event, timer])
    if winner == event:
        timer.cancel()
        return event.result
    return "timeout"


def test_event_wins_the_race_and_the_cancelled_timer_does_not_keep_the_instance_alive():
    d = Driver(handle_of(approval))
    d.start()
    assert d.scheduled() == [(TIMER, 0, None)]

    d.raise_event("approve", {"ok": True})

    assert d.status == "Completed"
    assert d.output == json.dumps({"ok": True})  # SDK quirk #295: the payload arrives as JSON text


def test_timer_wins_the_race():
    d = Driver(handle_of(approval))
    d.start()

    d.fire(0)

    assert d.status == "Completed" and d.output == "timeout"


def waits_twice(context: df.DurableOrchestrationContext):
    yield context.call_activity("echo", None)
    a = yield context.wait_for_external_event("go")
    b = yield context.wait_for_external_event("go")
    return [a, b]


def test_one_buffered_event_satisfies_two_waits_in_the_sdk_but_the_strict_host_keeps_waiting():
    d = Driver(handle_of(waits_twice))
    d.start()
    d.raise_event("go", 1)  # buffered: nobody waits for it yet

    d.complete(0, None)
    # SDK issue #507: the SDK now returns isDone, the real extension waits for a second event.
    assert d.status == "Running"
    d.raise_event("go", 2)

    assert d.status == "Completed" and d.output == ["1", "1"]


def fail_fast(context: df.DurableOrchestrationContext):
    try:
        yield context.task_all([context.call_activity("fail", 1), context.call_activity("slow", 2)])
    except Exception:  # noqa: BLE001, S110 - the failure is expected; what follows is tested
        pass
    return (yield context.call_activity("after", None))


def test_strict_scheduling_holds_the_next_action_until_every_task_all_child_resolved():
    d = Driver(handle_of(fail_fast))
    d.start()

    d.fail(0, "boom", "fail")
    assert d.scheduled() == [(TS, 0, "fail"), (TS, 1, "slow")]  # 'after' is not released yet
    d.complete(1, 2)
    assert d.scheduled()[-1] == (TS, 2, "after")
    d.complete(2, "x")

    assert d.status == "Completed" and d.output == "x"


def explodes(context: df.DurableOrchestrationContext):
    yield context.call_activity("echo", 1)
    raise ValueError("orchestrator exploded")


def test_unhandled_exception_fails_with_the_extension_message():
    d = Driver(handle_of(explodes), name="explodes")
    d.start()

    d.complete(0, 1)

    assert d.status == "Failed"
    assert d.output == "Orchestrator function 'explodes' failed: orchestrator exploded"


def test_changed_code_is_reported_as_nondeterminism():
    d = Driver(handle_of(chain))
    d.start()
    d.history[2]["Name"] = "say_goodbye"

    d.complete(0, "x")

    assert d.status == "Failed"
    assert "Non-Deterministic workflow detected" in d.output and "say_goodbye" in d.output


def test_episode_is_a_pure_function_of_its_inputs():
    first, second = Driver(handle_of(chain)), Driver(handle_of(chain))

    for d in (first, second):
        d.start("same")
        d.complete(0, "a")

    assert first.history == second.history and first.activities == second.activities


def uuids(context: df.DurableOrchestrationContext):
    a = context.new_uuid()
    yield context.call_activity("echo", 1)
    return [a, context.new_uuid()]


def test_new_uuid_is_stable_across_replays():
    d = Driver(handle_of(uuids))
    d.start()
    d.complete(0, 1)
    first = d.output
    d2 = Driver(handle_of(uuids))
    d2.start()
    d2.complete(0, 1)

    assert first == d2.output and len(set(first)) == 2


def restarts(context: df.DurableOrchestrationContext):
    n = int(context.get_input())
    if n >= 2:
        return n
    yield context.call_activity("echo", n)
    context.continue_as_new(n + 1)


def test_continue_as_new_starts_a_fresh_execution_with_the_new_input():
    d = Driver(handle_of(restarts))
    d.start(0)
    d.complete(0, 0)

    assert d.status == "ContinuedAsNew"
    start = [m for m in d.messages if m.payload["kind"] == "start"][-1]
    d.deliver(start.payload)
    assert d.status == "Running" and len(d.history) == 4
    d.complete(0, 1)
    d.deliver([m for m in d.messages if m.payload["kind"] == "start"][-1].payload)

    assert d.status == "Completed" and d.output == 2


def collector(context: df.DurableOrchestrationContext):
    seen = context.get_input()
    if len(seen) >= 2:
        return seen
    item = yield context.wait_for_external_event("item")
    context.continue_as_new(seen + [item])


def test_continue_as_new_carries_unconsumed_events_over():
    now = "2024-01-01T00:00:00.000000Z"
    two = [
        {"kind": "event", "event": h.event_raised(now, "item", json.dumps("b"))},
        {"kind": "event", "event": h.event_raised(now, "item", json.dumps("c"))},
    ]
    d2 = Driver(handle_of(collector))
    d2.start([])
    d2.deliver(*two)
    start = [m.payload for m in d2.messages if m.payload["kind"] == "start"][-1]

    assert d2.status == "ContinuedAsNew"
    assert [json.loads(c["Input"]) for c in start["carried"]] == ["c"]


def big_status(context: df.DurableOrchestrationContext):
    context.set_custom_status("x" * 20000)
    yield context.call_activity("echo", 1)


def test_custom_status_over_16k_fails_the_orchestration():
    d = Driver(handle_of(big_status))

    d.start()

    assert d.status == "Failed" and "custom status" in d.output


def long_sleep(context: df.DurableOrchestrationContext):
    yield context.create_timer(context.current_utc_datetime + timedelta(days=10))
    return "woke"


def test_long_timers_are_split_as_with_azure_storage():
    d = Driver(handle_of(long_sleep))
    d.start()
    fire_times = [
        h.parse_time(e["FireAt"]) - h.parse_time(d.now)
        for e in d.history
        if e["EventType"] == TIMER
    ]
    assert fire_times == [timedelta(days=3)]

    for timer_id in range(3):
        assert d.status == "Running"
        d.now = [e for e in d.history if e["EventType"] == TIMER][-1]["FireAt"]
        d.fire(timer_id)

    assert [e["EventId"] for e in d.history if e["EventType"] == TIMER] == [0, 1, 2]
    assert d.status == "Completed" and d.output == "woke"


def with_children(context: df.DurableOrchestrationContext):
    a = yield context.call_sub_orchestrator("child", 1, "explicit-id")
    b = yield context.call_sub_orchestrator("child", 2)
    return [a, b]


def test_sub_orchestrations_get_explicit_or_generated_ids_and_start_messages():
    d = Driver(handle_of(with_children))
    d.start()
    created = d.history[2]
    assert created["EventType"] == SUB and created["InstanceId"] == "explicit-id"
    start = d.messages[0]
    assert start.target == "explicit-id" and start.payload["kind"] == "start"
    parent = start.payload["event"]["ParentInstance"]
    assert parent["TaskScheduleId"] == 0 and parent["OrchestrationInstance"]["InstanceId"] == "i1"

    d.deliver(
        {
            "kind": "event",
            "event": h.sub_orchestration_completed(0, d.now, '"one"'),
            "execution_id": d.execution_id,
        }
    )

    assert d.history[-2]["InstanceId"] == f"{d.execution_id}:1"


def calls_entity(context: df.DurableOrchestrationContext):
    entity = df.EntityId("Counter", "k")
    context.signal_entity(entity, "add", 5)
    return (yield context.call_entity(entity, "get"))


def test_entity_call_and_signal_write_event_sent_and_wait_for_the_response():
    d = Driver(handle_of(calls_entity))
    d.start()
    assert d.scheduled() == [(SENT, 0, "add"), (SENT, 1, "get")]
    call = json.loads(d.history[3]["Input"])
    assert d.history[3]["InstanceId"] == "@counter@k" and call["parent"] == "i1"
    signal = json.loads(d.history[2]["Input"])
    assert signal["signal"] is True and "parent" not in signal

    response = json.dumps({"result": json.dumps(5)})
    d.deliver({"kind": "event", "event": h.event_raised(d.now, call["id"], response)})

    assert d.status == "Completed" and d.output == 5


def test_unknown_orchestrator_fails_the_instance():
    d = Driver(None, name="missing")

    d.start()

    assert d.status == "Failed" and "missing" in d.output


def test_terminate_records_the_reason_and_stops_without_invoking_the_code():
    d = Driver(handle_of(chain))
    d.start()

    d.deliver({"kind": "terminate", "reason": "enough"})

    assert d.status == "Terminated" and d.output == "enough"
    assert d.history[-2]["EventType"] == E.EXECUTION_TERMINATED


def test_messages_for_a_suspended_instance_are_held_until_resume():
    d = Driver(handle_of(chain))
    d.start()
    d.deliver({"kind": "suspend", "reason": "pause"})
    assert d.status == "Suspended"

    held = d.deliver(
        {
            "kind": "event",
            "event": h.task_completed(0, d.now, '"a"'),
            "execution_id": d.execution_id,
        }
    )
    assert held.consumed == [] and d.status == "Suspended"
    d.deliver(
        {"kind": "resume", "reason": "go"},
        {
            "kind": "event",
            "event": h.task_completed(0, d.now, '"a"'),
            "execution_id": d.execution_id,
        },
    )

    assert d.status == "Running" and d.scheduled()[-1] == (TS, 1, "say")


@pytest.mark.parametrize("raw", ['{"a": 1}', json.dumps(json.dumps({"a": 1}))])
def test_input_reaches_the_orchestrator_as_the_extension_passes_it(raw):
    seen = []

    def orch(context):
        seen.append(context.get_input())

    d = Driver(handle_of(orch))
    d.start(raw_input=raw)

    assert d.status == "Completed"
    assert seen[0] in ({"a": 1}, '{"a": 1}')


def test_event_arriving_between_executions_is_delivered_once_to_the_new_one():
    d = Driver(handle_of(collector))
    d.start([])
    d.raise_event("item", "a")
    assert d.status == "ContinuedAsNew"
    start = [m for m in d.messages if m.payload["kind"] == "start"][-1].payload
    late = {"kind": "event", "event": h.event_raised(d.now, "item", json.dumps(json.dumps("b")))}

    episode = d.deliver(late, start)  # the event was enqueued before the start message

    assert episode.consumed == [0, 1]
    assert d.status == "ContinuedAsNew"  # a new execution consumed "b" and continued again
    assert json.loads(
        json.loads(
            [m for m in d.messages if m.payload["kind"] == "start"][-1].payload["event"]["Input"]
        )
    ) == [json.dumps("a"), json.dumps("b")]  # JSON text: SDK quirk #295


def test_carried_events_stay_ahead_of_events_that_arrived_during_the_restart():
    d = Driver(handle_of(collector))
    d.start([])
    b = {"kind": "event", "event": h.event_raised(d.now, "item", json.dumps(json.dumps("b")))}
    c = {"kind": "event", "event": h.event_raised(d.now, "item", json.dumps(json.dumps("c")))}
    d.deliver(b, c)  # b is taken, c is carried into the next execution
    start = [m for m in d.messages if m.payload["kind"] == "start"][-1].payload
    late = {"kind": "event", "event": h.event_raised(d.now, "item", json.dumps(json.dumps("z")))}

    d.deliver(late, start)  # z reached the inbox before the start message

    final = [m for m in d.messages if m.payload["kind"] == "start"][-1].payload
    assert json.loads(json.loads(final["event"]["Input"])) == [json.dumps("b"), json.dumps("c")]
    assert [json.loads(e["Input"]) for e in final["carried"]] == [json.dumps("z")]
