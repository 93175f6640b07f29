"""Rewind of a Failed instance, decided by the pure episode (orchestration.py, "rewind").

Failed steps become GenericEvents ("Rewound: ...") and the replay schedules them again
under the same sequence ids; a retry that ran out starts over whole; a failed child is
rewound where it is; a step whose outcome never arrived runs again.
"""

from __future__ import annotations

import json
from typing import Any

import azure.durable_functions as df

from durable_host.core import history as h
from durable_host.core import orchestration as o
from durable_host.core.history import EventType as E
from tests.unit.durable_host.driver import Driver as BaseDriver
from tests.unit.durable_host.driver import handle_of

REWIND = {"kind": "rewind", "reason": "fixed it"}


class Driver(BaseDriver):
    """The episode driver, taking a rewound episode's events as the whole new history."""

    def deliver(self, *messages: dict[str, Any]) -> o.Episode:
        episode = super().deliver(*messages)
        if episode.rewrite_history:
            self.history = list(episode.events)
        return episode


def kinds(d: Driver) -> list[int]:
    return [e["EventType"] for e in d.history]


def two_steps(context: df.DurableOrchestrationContext):
    first = yield context.call_activity("echo", "a")
    second = yield context.call_activity("flaky", "b")
    return [first, second, (yield context.call_activity("echo", "c"))]


def test_a_failed_activity_runs_again_under_its_id_and_the_instance_completes():
    d = Driver(handle_of(two_steps), name="two_steps")
    d.start()
    d.complete(0, "A")
    d.fail(1, "boom", "flaky")
    assert d.status == "Failed"

    episode = d.deliver(REWIND)

    assert episode.rewrite_history and d.status == "Running" and episode.output_json is None
    rewound = [e["Data"] for e in d.history if e["EventType"] == E.GENERIC]
    assert rewound == [
        "Rewound: TaskScheduled 1",
        "Rewound: TaskFailed 1",
        "Rewound: ExecutionCompleted",
        "Rewind: fixed it",
    ]
    assert d.activities[-1]["task_id"] == 1 and d.activities[-1]["name"] == "flaky"
    assert [e["EventId"] for e in d.history if e["EventType"] == E.TASK_SCHEDULED] == [0, 1]
    d.complete(1, "B")
    d.complete(2, "C")
    assert d.status == "Completed" and d.output == ["A", "B", "C"]


def exhausts_retries(context: df.DurableOrchestrationContext):
    options = df.RetryOptions(first_retry_interval_in_milliseconds=100, max_number_of_attempts=2)
    value = yield context.call_activity_with_retry("flaky", options, "k")
    return [value, (yield context.call_activity("echo", "after"))]


def test_a_retry_that_ran_out_starts_over_with_its_full_budget():
    d = Driver(handle_of(exhausts_retries))
    d.start()
    d.fail(0, "one", "flaky")
    d.fire(1)
    d.fail(2, "two", "flaky")
    d.fire(3)
    assert d.status == "Failed"

    d.deliver(REWIND)

    live = [
        (e["EventType"], e.get("EventId"))
        for e in d.history
        if e["EventType"] in h.SCHEDULING_TYPES
    ]
    assert live == [(E.TASK_SCHEDULED, 0)]  # attempts and retry timers all rewound
    d.fail(0, "again", "flaky")  # the budget is whole again: a retry timer, not a failure
    assert d.status == "Running"
    d.fire(1)
    d.complete(2, "finally")
    d.complete(3, "after")
    assert d.status == "Completed" and d.output == ["finally", "after"]


def with_child(context: df.DurableOrchestrationContext):
    return (yield context.call_sub_orchestrator("child", 1, "kid"))


def test_a_failed_child_is_rewound_where_it_is_and_the_parent_keeps_its_creation():
    d = Driver(handle_of(with_child), name="parent")
    d.start()
    failure = h.sub_orchestration_failed(
        0, d.now, "Orchestrator function 'child' failed: x", "details"
    )
    d.deliver({"kind": "event", "event": failure, "execution_id": d.execution_id})
    assert d.status == "Failed"

    d.deliver(REWIND)

    created = [e for e in d.history if e["EventType"] == E.SUB_ORCHESTRATION_CREATED]
    assert len(created) == 1 and d.status == "Running"
    message = d.messages[-1]
    assert message.target == "kid" and message.payload["kind"] == "rewind"
    assert message.payload["start"]["ParentInstance"]["TaskScheduleId"] == 0
    d.deliver(
        {
            "kind": "event",
            "event": h.sub_orchestration_completed(0, d.now, '"ok"'),
            "execution_id": d.execution_id,
        }
    )
    assert d.status == "Completed" and d.output == "ok"


def test_a_child_that_did_not_fail_starts_again_when_its_parent_is_rewound():
    parent_start = Driver(handle_of(with_child), name="parent")
    parent_start.start()
    start = parent_start.messages[0].payload["event"]
    child = Driver(handle_of(two_steps), name="two_steps", instance_id="kid")
    child.deliver({"kind": "start", "event": start})
    child.deliver({"kind": "terminate", "reason": "stop"})
    assert child.status == "Terminated"

    child.deliver({"kind": "rewind", "reason": "parent", "start": start})

    assert child.status == "Running" and child.activities[-1]["task_id"] == 0
    assert kinds(child)[:2] == [E.ORCHESTRATOR_STARTED, E.EXECUTION_STARTED]


def races_then_raises(context: df.DurableOrchestrationContext):
    winner = yield context.task_any(
        [context.call_activity("flaky", 1), context.call_activity("slow", 2)]
    )
    if winner.result is None:
        raise ValueError("the race was lost")
    return winner.result


def test_a_step_left_without_an_outcome_runs_again():
    d = Driver(handle_of(races_then_raises))
    d.start()
    d.fail(0, "boom", "flaky")
    assert d.status == "Failed"  # 'slow' (task 1) is still out; its result would be dropped

    d.deliver(REWIND)

    assert sorted(a["task_id"] for a in d.activities) == [0, 0, 1, 1]
    d.complete(1, "slow won")
    assert d.status == "Completed" and d.output == "slow won"


def test_rewind_of_an_instance_that_did_not_fail_changes_nothing():
    d = Driver(handle_of(two_steps))
    d.start()
    before = list(d.history)

    episode = d.deliver(REWIND)

    assert episode.consumed == [0] and episode.events == [] and d.history == before
    assert d.status == "Running"


def test_events_raised_after_the_rewind_in_the_same_batch_are_taken():
    def waits(context):
        yield context.call_activity("flaky", 1)
        return (yield context.wait_for_external_event("go"))

    d = Driver(handle_of(waits))
    d.start()
    d.fail(0, "boom", "flaky")
    event = {"kind": "event", "event": h.event_raised(d.now, "go", json.dumps("yes"))}

    d.deliver(REWIND, event)
    d.complete(0, None)

    assert d.status == "Completed" and d.output == "yes"
