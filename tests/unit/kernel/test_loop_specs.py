"""Agent loops, the pure part: declarations, ids, occurrences, control."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

import functions_schedules
from durable_host.triggers import ncrontab
from kernel.common.errors import ValidationError
from kernel.loops import cron
from kernel.loops import loop as loops

NOW = datetime(2026, 1, 1, 8, 0, 1, tzinfo=UTC)


def test_a_declaration_becomes_a_spec_and_its_occurrences() -> None:
    spec = loops.parse_spec(
        {"loopId": "digest", "schedule": "0 0 9 * * *", "prompt": "p", "timeZone": "Europe/Berlin"},
        NOW,
    )
    due = loops.next_occurrence(spec, NOW)
    assert due == datetime(2026, 1, 2, 8, tzinfo=UTC)  # 09:00 in Berlin
    assert loops.occurrence_request_id("digest", due) == "loop:digest:2026-01-02T08:00:00Z"
    assert loops.loop_instance_id("s1", "digest") == "loop:s1:digest"
    assert loops.spec_from_json(spec.as_json()) == spec


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"schedule": "* * *"}, "schedule"),
        ({"schedule": "0 0 0 30 2 *"}, "schedule"),
        ({"timeZone": "Nowhere/Land"}, "timeZone"),
        ({"prompt": " "}, "prompt"),
        ({"loopId": "no spaces"}, "loopId"),
        ({"tools": "calculator"}, "tools"),
        ({"policy": []}, "policy"),
        ({"surprise": True}, "surprise"),
        ({"tools": ["calculator", "teleport"]}, "tools[1]"),
        ({"tools": ["calculator", "calculator"]}, "tools[1]"),
        ({"policy": {"max_rounds": -1}}, "policy.max_rounds"),
        ({"policy": {"max_rounds": True}}, "policy.max_rounds"),
        ({"policy": {"max_concurrent_model_calls": 9}}, "policy.max_concurrent_model_calls"),
        ({"policy": {"base_backoff_s": 90}}, "policy.base_backoff_s"),
    ],
)
def test_a_bad_declaration_names_its_field(change: dict[str, object], field: str) -> None:
    body = {"loopId": "l", "schedule": "0 0 9 * * *", "prompt": "p", **change}
    with pytest.raises(ValidationError) as caught:
        loops.parse_spec(body, NOW)
    assert caught.value.field == field


def test_declared_tools_and_policy_travel_with_each_run() -> None:
    body = {"loopId": "l", "schedule": "0 0 9 * * *", "prompt": "p"}
    plain = loops.parse_spec(body, NOW)
    assert loops.run_options(plain) == {}  # the whole catalogue, the app's settings
    narrow = loops.parse_spec(
        {**body, "tools": ["read_document", "calculator"], "policy": {"max_rounds": 2}}, NOW
    )
    assert loops.run_options(narrow) == {
        "tools": ["read_document", "calculator"],
        "policy": {"max_rounds": 2},
    }
    assert loops.spec_from_json(narrow.as_json()) == narrow


def test_control_pauses_resumes_and_deletes() -> None:
    assert loops.control({}, "pause") == {"paused": True, "deleted": False}
    assert loops.control({"paused": True}, "resume") == {"paused": False, "deleted": False}
    assert loops.control({"paused": True}, "delete")["deleted"] is True
    with pytest.raises(ValidationError):
        loops.control({}, "explode")


def test_the_kernel_cron_is_the_parser_the_host_uses() -> None:
    """One parser for loops and timer triggers (the app cannot import its host, so both take
    it from the shared package): a copy in either would drift."""
    for name in ("Schedule", "ScheduleError", "parse", "time_zone"):
        assert getattr(cron, name) is getattr(functions_schedules, name)
        assert getattr(ncrontab, name) is getattr(functions_schedules, name)
