"""Orchestration behaviour end to end: a real host process, real HTTP, the real SDK."""

from __future__ import annotations

import json
import uuid

from tests.harness import WEBHOOK, HostProcess, wait_for


def start(host: HostProcess, name: str, value=None) -> str:
    """Start through the app's HTTP function, i.e. the SDK client's ``start_new``."""
    resp = host.post(f"/api/orchestrators/{name}", value)
    assert resp.status == 202, resp.body
    return resp.json()["id"]


def run(host: HostProcess, name: str, value=None) -> dict:
    return host.wait_for_status(start(host, name, value))


def test_sequence_of_activities_completes_with_their_outputs(shared_host):
    status = run(shared_host, "hello_sequence")

    assert status["runtimeStatus"] == "Completed"
    assert status["output"] == ["Hello Tokyo!", "Hello Seattle!", "Hello London!"]


def test_fan_out_fan_in(shared_host):
    assert run(shared_host, "fan_out", {"count": 50})["output"] == sum(2 * i for i in range(50))


def test_activity_retry_succeeds_on_the_third_attempt(shared_host):
    status = run(shared_host, "with_retry")

    assert status["output"] == "ok after 3"


def test_exhausted_retry_reaches_the_orchestrator_as_an_exception(shared_host):
    status = run(shared_host, "retry_exhausted")

    assert status["output"].startswith("caught: Activity function 'fail' failed: always")


def test_activity_failure_text_matches_the_extension(shared_host):
    assert run(shared_host, "catches_failure")["output"] == "Activity function 'fail' failed: boom "


def test_unhandled_orchestrator_exception_fails_the_instance(shared_host):
    status = run(shared_host, "fails")

    assert status["runtimeStatus"] == "Failed"
    assert status["output"] == "Orchestrator function 'fails' failed: orchestrator exploded"


def test_sub_orchestrations_with_explicit_and_generated_ids(shared_host):
    status = run(shared_host, "parent")

    assert status["output"] == {"a": ["Hello Tokyo!", "Hello Seattle!", "Hello London!"], "b": 6}
    child = shared_host.status(f"{status['instanceId']}-child")
    assert child is not None and child["runtimeStatus"] == "Completed"


def test_failed_child_reaches_the_parent_as_an_exception(shared_host):
    status = run(shared_host, "parent_of_failure")

    assert status["output"] == "Orchestrator function 'fails' failed: orchestrator exploded "


def test_terminated_child_reaches_its_parent_as_a_failure(shared_host):
    parent = shared_host.start_orchestration("parent_of_waiter")
    child = f"{parent}-child"
    wait_for(lambda: shared_host.status(child), 60, "child to start")

    assert shared_host.post(f"{WEBHOOK}/instances/{child}/terminate?reason=stop").status == 202
    status = shared_host.wait_for_status(parent)

    assert status["output"].startswith("child failed:")
    assert shared_host.status(child)["runtimeStatus"] == "Terminated"


def test_external_event_raised_through_the_webhook(shared_host):
    instance = shared_host.start_orchestration("approval")

    resp = shared_host.post(f"{WEBHOOK}/instances/{instance}/raiseEvent/approve", {"by": "ann"})
    status = shared_host.wait_for_status(instance)

    assert resp.status == 202
    assert status["output"] == {"approved": {"by": "ann"}}


def test_external_event_raised_through_the_sdk_client_arrives_as_json_text(shared_host):
    instance = shared_host.start_orchestration("approval")

    resp = shared_host.post(f"/api/events/{instance}/approve", {"by": "bob"})
    status = shared_host.wait_for_status(instance)

    assert resp.status == 202
    assert status["output"] == {"approved": json.dumps({"by": "bob"})}  # SDK issue #295


def test_events_raised_before_the_wait_are_buffered(shared_host):
    instance = shared_host.start_orchestration("two_events")
    shared_host.post(f"{WEBHOOK}/instances/{instance}/raiseEvent/b", 2)
    shared_host.post(f"{WEBHOOK}/instances/{instance}/raiseEvent/a", 1)

    assert shared_host.wait_for_status(instance)["output"] == [1, 2]


def test_durable_timer_delays_the_next_step(shared_host):
    status = run(shared_host, "sleeper", 0.5)

    assert status["output"] == "Hello after sleep!"
    history = shared_host.status(status["instanceId"], "?showHistory=true")["historyEvents"]
    fired = [e for e in history if e["EventType"] == "TimerFired"]
    assert len(fired) == 1 and fired[0]["Timestamp"] >= fired[0]["FireAt"]


def test_continue_as_new_restarts_with_new_input(shared_host):
    assert run(shared_host, "counter_loop", 0)["output"] == 3


def test_continue_as_new_keeps_events_that_arrive_in_between(shared_host):
    instance = start(shared_host, "eternal_with_events", [])
    for item in ("x", "y", "z"):
        shared_host.post(f"{WEBHOOK}/instances/{instance}/raiseEvent/item", item)

    assert shared_host.wait_for_status(instance)["output"] == ["x", "y", "z"]


def test_custom_status_is_published(shared_host):
    status = run(shared_host, "custom_status")

    assert status["customStatus"] == {"phase": "done"}


def test_custom_status_over_the_limit_fails(shared_host):
    status = run(shared_host, "huge_status")

    assert status["runtimeStatus"] == "Failed" and "custom status" in status["output"]


def test_strict_scheduling_runs_the_follow_up_only_after_every_sibling_ended(shared_host):
    status = run(shared_host, "fail_fast_then_more")

    assert status["output"] == "after"
    events = shared_host.status(status["instanceId"], "?showHistory=true")["historyEvents"]
    slow_done = next(i for i, e in enumerate(events) if e.get("FunctionName") == "slow")
    echo_done = next(i for i, e in enumerate(events) if e.get("FunctionName") == "echo")
    assert slow_done < echo_done


def test_version_comes_from_the_start_request(shared_host):
    instance = str(uuid.uuid4())
    shared_host.post(f"{WEBHOOK}/orchestrators/versioned/{instance}?version=2.1")

    assert shared_host.wait_for_status(instance)["output"] == "2.1"


def test_new_uuid_values_are_deterministic_and_distinct(shared_host):
    first, second = run(shared_host, "uuids")["output"]

    assert first != second and uuid.UUID(first) and uuid.UUID(second)


def test_activity_with_a_durable_client_raises_an_event(shared_host):
    assert run(shared_host, "event_from_activity")["output"] == json.dumps({"n": 1})


def test_durable_http_call(shared_host):
    status = run(shared_host, "http_caller", f"{shared_host.base_url}/admin/host/status")

    assert status["output"] == 200


def test_history_view_has_the_extension_shape(shared_host):
    status = run(shared_host, "hello_sequence")

    view = shared_host.status(status["instanceId"], "?showHistory=true&showHistoryOutput=true")
    kinds = [e["EventType"] for e in view["historyEvents"]]

    assert kinds == [
        "ExecutionStarted",
        "TaskCompleted",
        "TaskCompleted",
        "TaskCompleted",
        "ExecutionCompleted",
    ]
    assert view["historyEvents"][1]["FunctionName"] == "say_hello"
    assert view["historyEvents"][1]["Result"] == "Hello Tokyo!"
    assert "EventId" not in view["historyEvents"][1]
