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

from typing import Any

from durable_host.core import history as h
from orchestrators import agent_loop
from tests.unit.durable_host.driver import Driver

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
