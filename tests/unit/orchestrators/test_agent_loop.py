"""``agent_loop`` never loses a control event raised while it submits an occurrence.

Once a loop's timer has won the race with the control event, the event's waiter stays
registered for the rest of that execution: an event raised while the occurrence was being
submitted went to it, nobody awaited it, and continue-as-new did not carry it over - a pause
sent at that moment was lost for good. The loop now continues as new as soon as its timer
fires and submits the occurrence first thing in the next execution, before it waits; an event
raised during the submission is kept and taken by that wait. Executions started by the
earlier code (no ``submit_first`` in their input) keep their recorded order of actions.
Driven episode by episode through the host's pure episode function, no IO.
"""

from __future__ import annotations

import json
from typing import Any

from durable_host.core import history as h
from kernel.loops import loop as loops
from orchestrators import agent_loop
from tests.unit.durable_host.driver import T0, Driver

SPEC = {"loopId": "digest", "schedule": "*/2 * * * * *", "prompt": "daily digest"}
SUBMITTED = {"ok": True, "request_id": "loop:digest:x", "submission_id": "sub-1"}


def loop_driver() -> Driver:
    handle: Any = agent_loop.agent_loop._function._func  # the SDK handle the app registers
    return Driver(handle, name="agent_loop", instance_id="loop:s:digest")


def next_execution(d: Driver) -> None:
    start = [m for m in d.messages if m.payload["kind"] == "start"][-1]
    d.deliver(start.payload)


def scheduled_activities(d: Driver) -> list[str | None]:
    return [e.get("Name") for e in d.history if e["EventType"] == h.EventType.TASK_SCHEDULED]


def test_a_pause_raised_while_an_occurrence_is_submitted_pauses_the_loop() -> None:
    d = loop_driver()
    d.start({"session_id": "s", "spec": SPEC, "submit_first": True})
    d.fire(0)  # the occurrence is due: the execution continues as new at once
    assert d.status == "ContinuedAsNew" and scheduled_activities(d) == []
    next_execution(d)
    assert scheduled_activities(d) == ["loop_submit"]  # submitted before any wait

    d.raise_event("loop_control", {"action": "pause"})  # while the submission runs
    d.complete(0, SUBMITTED)
    assert d.status == "ContinuedAsNew"
    next_execution(d)

    assert d.custom_status["phase"] == "paused" and d.custom_status["runs"] == 1
    assert d.custom_status.get("next") is None


def test_an_execution_started_by_the_earlier_code_still_submits_after_the_race() -> None:
    d = loop_driver()
    d.start({"session_id": "s", "spec": SPEC})  # no submit_first: recorded by the earlier code
    d.fire(0)

    # The same actions as before: the occurrence is submitted in this execution.
    assert d.status == "Running" and scheduled_activities(d) == ["loop_submit"]
    d.complete(1, SUBMITTED)
    assert d.status == "ContinuedAsNew"
    next_execution(d)  # and the execution after it follows the new order
    assert d.custom_status["phase"] == "sleeping" and d.custom_status["runs"] == 1


# --- controls held by the loop's entity (an input with an incarnation) -------------------

INCARNATION = {"session_id": "s", "spec": SPEC, "submit_first": True, "incarnation": "c1"}


def answer_take(d: Driver, taken: list[dict[str, str]]) -> None:
    """Answer the execution's ``take`` call on its ``loop_control`` entity with ``taken``."""
    calls = [e for e in d.history if e["EventType"] == h.EventType.EVENT_SENT]
    call = json.loads(calls[-1]["Input"])
    assert calls[-1]["Name"] == "take" and calls[-1]["InstanceId"] == "@loop_control@s:digest:c1"
    response = json.dumps({"result": json.dumps(taken)})
    d.deliver({"kind": "event", "event": h.event_raised(d.now, call["id"], response)})


def control(action: str, n: int) -> dict[str, str]:
    return {"action": action, "id": f"r{n}"}


def through_the_drain(d: Driver) -> None:
    """From a woken execution to the one that takes: the execution between drains the
    wake-ups buffered behind the one that woke the loop (none here) and continues as new."""
    assert d.status == "ContinuedAsNew"
    next_execution(d)
    assert [e["EventType"] for e in d.history if e["EventType"] in h.SCHEDULING_TYPES] == [
        h.EventType.TIMER_CREATED  # its first step: a wake-up raced with a timer due now
    ]
    d.fire(0)
    assert d.status == "ContinuedAsNew"
    next_execution(d)


def test_a_pause_raised_with_the_timer_that_won_is_taken_from_the_entity() -> None:
    d = loop_driver()
    d.start(INCARNATION)
    answer_take(d, [])
    assert d.custom_status["phase"] == "sleeping"
    # The timer and the wake-up of a pause arrive in one batch: the timer wins, the event goes
    # to the stale waiter and is dropped with the execution - the pause is in the entity.
    fired = h.timer_fired(1, d.now, d.now)  # 0 is the take
    woken = h.event_raised(d.now, "loop_control", json.dumps(json.dumps({"action": "wake"})))
    d.deliver(
        {"kind": "event", "event": fired, "execution_id": d.execution_id},
        {"kind": "event", "event": woken},
    )
    assert d.status == "ContinuedAsNew"
    next_execution(d)
    assert scheduled_activities(d) == ["loop_submit"]  # the occurrence that was due
    d.complete(0, SUBMITTED)
    answer_take(d, [control("pause", 1)])

    assert d.custom_status["phase"] == "paused" and d.custom_status["runs"] == 1
    assert d.custom_status["controls"]["applied"] == 1


def test_controls_taken_together_apply_in_order_each_once() -> None:
    d = loop_driver()
    d.start(INCARNATION)
    answer_take(d, [control("pause", 1), control("resume", 2), control("pause", 3)])
    assert d.custom_status["phase"] == "paused"
    d.raise_event("loop_control", {"action": "wake"})
    through_the_drain(d)
    answer_take(d, [control("resume", 4)])

    status = d.custom_status
    assert status["phase"] == "sleeping" and status["controls"]["applied"] == 4
    expected = 0
    for n in range(1, 5):
        expected = loops.control_digest(expected, f"r{n}")
    assert status["controls"]["digest"] == f"{expected:08x}"


def test_a_delete_ends_the_loop_and_the_entity() -> None:
    d = loop_driver()
    d.start(INCARNATION)
    answer_take(d, [control("delete", 1), control("pause", 2)])

    assert d.status == "Completed" and d.output == {"deleted": True, "runs": 0}
    assert d.custom_status["phase"] == "deleted" and d.custom_status["controls"]["applied"] == 1
    assert d.history[-3]["Name"] == "forget"  # the entity's state goes with the loop


def test_an_action_sent_as_the_event_by_the_earlier_code_still_applies() -> None:
    d = loop_driver()
    d.start(INCARNATION)
    answer_take(d, [])
    d.raise_event("loop_control", {"action": "pause"})
    through_the_drain(d)
    answer_take(d, [])
    assert d.custom_status["phase"] == "paused"


# --- a burst of wake-ups ------------------------------------------------------------------


def wake_up_args() -> tuple[str, str]:
    return "loop_control", json.dumps(json.dumps({"action": "wake"}))


def wake_up() -> dict[str, Any]:
    return h.event_raised(T0, *wake_up_args())


def open_take(d: Driver) -> bool:
    """Whether the execution waits for the answer of its ``take`` call."""
    calls = [e for e in d.history if e["EventType"] == h.EventType.EVENT_SENT]
    answered = {e.get("Name") for e in d.history if e["EventType"] == h.EventType.EVENT_RAISED}
    return bool(calls) and json.loads(calls[-1]["Input"])["id"] not in answered


def open_drain_timer(d: Driver) -> int | None:
    """The id of the execution's last timer when it is due now and has not fired: a drain's."""
    timers = [e for e in d.history if e["EventType"] == h.EventType.TIMER_CREATED]
    fired = {e["TimerId"] for e in d.history if e["EventType"] == h.EventType.TIMER_FIRED}
    if not timers or timers[-1]["EventId"] in fired or timers[-1]["FireAt"] > d.now:
        return None
    return int(timers[-1]["EventId"])


def settle(d: Driver, requests: list[dict[str, str]], limit: int) -> tuple[int, int, int]:
    """Drive the loop until it sleeps with nothing left to take: every ``take`` answered
    (``requests`` by the first), every drain timer fired, every execution started with what
    the one before carried. (executions started, the largest history of one, the events of all
    of them)."""
    executions, largest, total = 0, 0, 0
    pending = list(requests)
    for _ in range(limit):
        if executions > 10:  # one execution per wake-up: no need to walk them all
            raise AssertionError(f"{executions} executions and counting ({total} events)")
        if d.status == "ContinuedAsNew":
            largest, total = max(largest, len(d.history)), total + len(d.history)
            next_execution(d)
            executions += 1
        elif open_take(d):
            answer_take(d, pending)
            pending = []
        elif (timer := open_drain_timer(d)) is not None:
            d.fire(timer)
        else:
            return executions, max(largest, len(d.history)), total + len(d.history)
    raise AssertionError(f"the loop did not settle in {limit} steps ({executions} executions)")


def test_a_burst_of_wake_ups_costs_a_few_executions_whatever_its_size() -> None:
    """A thousand requests at once: each raised a wake-up, all reach the sleeping execution in
    one batch. The loop takes them in a bounded number of executions (counted, not timed) whose
    histories hold each wake-up once, and applies every request once."""
    n = 1000
    d = loop_driver()
    d.start(INCARNATION)
    answer_take(d, [])
    assert d.custom_status["phase"] == "sleeping"
    d.deliver(*({"kind": "event", "event": wake_up()} for _ in range(n)))
    assert d.status == "ContinuedAsNew"  # the first wake-up ends the execution

    requests = [control("pause" if k % 2 == 0 else "resume", k) for k in range(n)]
    executions, largest, total = settle(d, requests, limit=4 * n + 20)

    assert executions <= 3, executions  # one drains what the burst left, one takes
    assert total <= 4 * n, (largest, total)  # each wake-up once: O(n) rows, not O(n^2)
    status = d.custom_status
    assert status["phase"] == "sleeping" and status["controls"]["applied"] == n
    assert status["generation"] == 1 + executions
    start = [m for m in d.messages if m.payload["kind"] == "start"][-1]
    assert start.payload.get("carried") == []  # nothing left buffered behind the loop


def test_a_burst_arriving_while_a_drain_runs_is_drained_with_it() -> None:
    d = loop_driver()
    d.start(INCARNATION)
    answer_take(d, [])
    d.raise_event("loop_control", {"action": "wake"})
    next_execution(d)  # drains: its first wait meets the wake-ups as they come
    for _ in range(5):
        d.deliver({"kind": "event", "event": wake_up()}, {"kind": "event", "event": wake_up()})
        assert d.status == "Running"
    executions, _, _ = settle(d, [control("pause", 1)], limit=40)

    assert executions == 1 and d.custom_status["phase"] == "paused"
    assert not [e for e in d.history if e.get("Name") == "loop_control"]  # none left over


def test_an_action_sent_as_the_event_is_applied_when_drained() -> None:
    pause = json.dumps({"action": "pause"})  # an app of the earlier code, during a deploy
    d = loop_driver()
    d.start(INCARNATION)
    answer_take(d, [])
    d.deliver(
        {"kind": "event", "event": wake_up()},
        {"kind": "event", "event": h.event_raised(T0, "loop_control", json.dumps(pause))},
        {"kind": "event", "event": wake_up()},
    )
    settle(d, [], limit=20)
    assert d.custom_status["phase"] == "paused"


def test_a_steady_stream_does_not_hold_the_requests_past_the_drain_window() -> None:
    """Wake-ups that keep winning against the drain's timer (a store that delivers the timer
    after them) stop the drain once ``DRAIN_WINDOW`` has passed: the next execution takes."""
    d = loop_driver()
    d.start(INCARNATION)
    answer_take(d, [])
    d.raise_event("loop_control", {"action": "wake"})
    next_execution(d)  # the drain
    for tenth in range(1, 40):
        d.now = f"2024-01-01T00:00:{tenth // 10:02d}.{tenth % 10}00000Z"
        d.deliver({"kind": "event", "event": h.event_raised(d.now, *wake_up_args())})
        if d.status == "ContinuedAsNew":
            break
    assert d.status == "ContinuedAsNew" and tenth == 20  # 2 s of the orchestration's time
    next_execution(d)
    answer_take(d, [control("pause", 1)])
    assert d.custom_status["phase"] == "paused" and d.custom_status["controls"]["applied"] == 1
