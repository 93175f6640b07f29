"""Versions without processes: comparison, settings, the verdict, parking, the shim's child
versions and the non-determinism messages."""

from __future__ import annotations

import json

import pytest

from durable_host.core import history as h
from durable_host.core import orchestration, shim, versioning
from durable_host.core.records import MessageKind, RuntimeStatus
from durable_host.core.versioning import FailureStrategy, MatchStrategy, VersionPolicy
from durable_host.functions.config import ConfigError, parse_host_json

T0 = "2024-01-01T00:00:00.000000Z"


@pytest.mark.parametrize(
    ("source", "other", "expected"),
    [
        ("1.0.0", "1.0.0", 0),
        ("1.1.0", "1.0.0", 1),
        ("1.0.0", "1.1.0", -1),
        ("1", "1", 0),
        ("2", "1", 1),
        ("", "1", -1),
        ("1", "", 1),
        ("", None, 0),
        ("  ", "", 0),  # blank is empty
        ("1.10", "1.9", 1),  # System.Version: numeric parts
        ("1.0", "1.0.0", -1),  # a missing part is below any present one
        ("10", "9", -1),  # one part is not a System.Version: ordinal strings
        ("V1.0-release", "v1.0-RELEASE", 0),  # case-insensitive
        ("2025-01-02", "2025-01-10", -1),
    ],
)
def test_versions_compare_as_the_extension_compares_them(source, other, expected):
    assert versioning.compare(source, other) == expected


def test_settings_come_from_host_json_and_app_settings_override_them(tmp_path):
    durable = {"durableTask": {"defaultVersion": "1.0", "versionFailureStrategy": "fail"}}
    env = {"AzureFunctionsJobHost__extensions__durableTask__versionMatchStrategy": "strict"}

    plain = parse_host_json(tmp_path, {"extensions": durable}).versioning
    overridden = parse_host_json(tmp_path, {"extensions": durable}, env).versioning
    unversioned = parse_host_json(tmp_path, {}).versioning

    assert plain == VersionPolicy("1.0", MatchStrategy.CURRENT_OR_OLDER, FailureStrategy.FAIL)
    assert overridden.match == MatchStrategy.STRICT
    assert unversioned.match == MatchStrategy.NONE  # no defaultVersion, no strategy: no checks
    with pytest.raises(ConfigError, match="versionMatchStrategy 'Newest'"):
        parse_host_json(
            tmp_path, {"extensions": {"durableTask": {"versionMatchStrategy": "Newest"}}}
        )


def _start(version: str) -> dict:
    event = h.execution_started(
        at=T0, name="orch", instance_id="i", execution_id="", input_json=None, version=version
    )
    return {"kind": MessageKind.START, "event": event}


def _raised() -> dict:
    return {"kind": MessageKind.EVENT, "event": h.event_raised(T0, "go", None)}


def test_the_verdict_names_what_waits_and_lets_terminates_and_late_messages_through():
    policy = VersionPolicy("1.0", MatchStrategy.CURRENT_OR_OLDER)
    strict = VersionPolicy("2.0", MatchStrategy.STRICT)

    newer_start = versioning.blocked(policy, RuntimeStatus.PENDING, "2.0", [_start("2.0")])
    older_event = versioning.blocked(policy, RuntimeStatus.RUNNING, "0.9", [_raised()])
    strict_event = versioning.blocked(strict, RuntimeStatus.RUNNING, "1.0", [_raised()])
    terminate = [_raised(), {"kind": MessageKind.TERMINATE, "reason": "x"}]

    assert newer_start is not None and newer_start.name == "orch" and not newer_start.fail
    assert "instance has version '2.0'" in newer_start.reason
    assert "defaultVersion '1.0', versionMatchStrategy CurrentOrOlder" in newer_start.reason
    assert older_event is None
    assert strict_event is not None and strict_event.version == "1.0"
    assert versioning.blocked(strict, RuntimeStatus.RUNNING, "1.0", terminate) is None
    assert versioning.blocked(strict, RuntimeStatus.COMPLETED, "1.0", [_raised()]) is None
    assert versioning.blocked(VersionPolicy(), RuntimeStatus.RUNNING, "9", [_raised()]) is None


def test_a_parked_instance_is_skipped_by_scans_until_the_recheck_interval():
    parking = versioning.Parking()
    verdict = versioning.Verdict("1.0", VersionPolicy("2.0", MatchStrategy.STRICT), "orch")

    first = parking.park("i", verdict, T0, 100.0)
    again = parking.park("i", verdict, "2024-01-01T00:01:00.000000Z", 101.0)

    assert first and not again
    assert parking.skips("i", 101.0 + parking.RECHECK_SECONDS - 1)
    assert not parking.skips("i", 101.0 + parking.RECHECK_SECONDS)
    assert parking.status("i")["since"] == T0  # parked since the first verdict
    parking.release("i")
    assert not parking.skips("i", 102.0) and parking.status("i") is None


# --- the shim: child versions and non-determinism ------------------------------------------


def _parent_history(version: str) -> list[dict]:
    started = h.execution_started(
        at=T0, name="parent", instance_id="p", execution_id="e1", input_json=None, version=version
    )
    return [h.orchestrator_started(T0), started]


def _child_action(version: str | None) -> dict:
    return {
        "actionType": 2,
        "functionName": "child",
        "input": None,
        "instanceId": "c",
        "version": version,
    }


@pytest.mark.parametrize(("given", "expected"), [(None, "2.0"), ("0.9", "0.9"), ("", "")])
def test_a_child_started_without_a_version_gets_the_host_default(given, expected):
    events = _parent_history("1.0")
    view = shim.InstanceView("p", "Running", "e1", events, "parent")
    walker = shim.Shim(view, events, T0, "e1", default_version="2.0")

    walker.walk([_child_action(given)])

    created = walker.new_events[0]
    start = walker.outbox[0].payload["event"]
    assert created["Version"] == expected and start["Version"] == expected
    assert start["ParentInstance"]["Version"] == "1.0"


def _replay(history: list[dict], actions: list[dict]) -> shim.Shim:
    view = shim.InstanceView("p", "Running", "e1", history, "parent")
    walker = shim.Shim(view, history, T0, "e1")
    walker.walk(actions)
    walker.check_replayed()
    return walker


def _activity(name: str) -> dict:
    return {"actionType": 0, "functionName": name, "input": json.dumps(None)}


def test_a_changed_action_names_the_event_what_history_expected_and_what_the_code_does():
    history = [*_parent_history("1.0"), h.task_scheduled(0, T0, "mark", "null")]

    with pytest.raises(shim.NonDeterminismError) as caught:
        _replay(history, [_activity("stamp")])

    text = str(caught.value)
    assert "history event TaskScheduled #0 (activity 'mark') was expected" in text
    assert "now schedules a call to activity 'stamp' with sequence id 0" in text


def test_a_recorded_action_the_code_no_longer_schedules_is_named_too():
    history = [
        *_parent_history("1.0"),
        h.task_scheduled(0, T0, "mark", "null"),
        h.task_completed(0, T0, '"ok"'),
        h.task_scheduled(1, T0, "stamp", "null"),
    ]
    wait = {"actionType": 6, "externalEventName": "go"}

    with pytest.raises(shim.NonDeterminismError) as caught:
        _replay(history, [_activity("mark"), wait])

    text = str(caught.value)
    assert "history event TaskScheduled #1 (activity 'stamp') was expected" in text
    assert "no longer schedules it (its last action is a wait for external event 'go')" in text


def test_the_episode_fails_a_changed_instance_with_that_message():
    def changed(context_json: str) -> str:
        return json.dumps({"isDone": False, "schemaVersion": 2, "actions": [[_activity("stamp")]]})

    history = [*_parent_history("1.0"), h.task_scheduled(0, T0, "mark", "null")]
    view = orchestration.InstanceView("p", RuntimeStatus.RUNNING, "e1", history, "parent")
    message = {"kind": MessageKind.EVENT, "event": h.task_completed(0, T0, '"ok"')}

    episode = orchestration.run_episode(changed, view, [(1, message)], T0, "e2")

    assert episode.status == RuntimeStatus.FAILED
    assert "TaskScheduled #0 (activity 'mark') was expected" in json.loads(episode.output_json)
