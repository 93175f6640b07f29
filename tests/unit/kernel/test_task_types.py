"""The task-type registry and the pure contract of the notices workflow."""

from __future__ import annotations

import re
from typing import Any

import pytest

from kernel.common.errors import ValidationError
from kernel.session import task_types as tt
from kernel.session.documents import DOCUMENT_ID_PATTERN, validate_document


def notices(**changes: Any) -> dict[str, Any]:
    job: dict[str, Any] = {
        "session_id": "s-1",
        "submission_id": "sub-1",
        "tool_task_id": "sub-1:tool:1:0",
        "recipients": ["ana@example.com", "bo@example.com"],
        "subject": "Q3 update",
        "body": "The plan changes on May 1.",
        "policy": "allSettled",
    }
    job.update(changes)
    return {k: v for k, v in job.items() if v is not None}


def rejection(data: object, kind: str = "send_notices") -> tuple[str, str | None]:
    with pytest.raises(ValidationError) as caught:
        tt.parse_input(kind, data)
    return caught.value.code, caught.value.field


def test_registry_names_kind_and_version_of_every_task_kind() -> None:
    assert {k: (t.kind, t.version) for k, t in tt.TASK_TYPES.items()} == {
        "turn": ("turn", "1"),
        "round": ("round", "1"),
        "model_call": ("model_call", "1"),
        "tool": ("tool", "1"),
        "send_notices": ("send_notices", "1"),
        "send_notice": ("send_notice", "1"),
    }
    with pytest.raises(ValidationError) as caught:
        tt.task_type("send_pigeons")
    assert caught.value.code == "unknown_task_kind"


def test_the_current_version_of_each_kind_is_the_last_it_records() -> None:
    for kind in tt.TASK_TYPES.values():
        assert kind.since[-1][0] == kind.version, kind.kind
        assert kind.version_for("999.0") == kind.version


def test_an_instance_follows_the_kind_version_of_its_app_version() -> None:
    kind = tt.TaskType("round", "3", since=(("1", ""), ("2", "2.0"), ("3", "10.0")))

    assert [kind.version_for(v) for v in ("", "1.0", "2.0", "9.5", "10.0")] == [
        "1",
        "1",
        "2",
        "2",
        "3",
    ]
    assert kind.follows("2.1", "2") and not kind.follows("1.9", "2")


def test_a_valid_input_parses_with_default_settings() -> None:
    job = tt.parse_input("send_notices", notices())

    assert job.recipients == ["ana@example.com", "bo@example.com"]
    assert job.settings == tt.NoticeSettings()
    assert job.body_ref is None


@pytest.mark.parametrize(
    ("changes", "code", "field"),
    [
        ({"recipients": []}, "no_recipients", "recipients"),
        (
            {"recipients": [f"u{i}@example.com" for i in range(51)]},
            "too_many_recipients",
            "recipients",
        ),
        (
            {"recipients": ["ana@example.com", "not an address"]},
            "invalid_recipient",
            "recipients[1]",
        ),
        ({"recipients": ["ana@example"]}, "invalid_recipient", "recipients[0]"),
        (
            {"recipients": ["ana@example.com", "x@y.org", "ANA@Example.com"]},
            "duplicate_recipient",
            "recipients[2]",
        ),
        ({"recipients": ["ana@example.com", 7]}, "invalid_input", "recipients[1]"),
        ({"body": None}, "missing_body", "body"),
        ({"body_ref": "sha256:" + "0" * 64}, "ambiguous_body", "body_ref"),
        ({"body": "   "}, "empty_body", "body"),
        ({"body": None, "body_ref": "no spaces allowed"}, "invalid_input", "body_ref"),
        ({"subject": "two\nlines"}, "invalid_subject", "subject"),
        ({"subject": ""}, "invalid_input", "subject"),
        ({"policy": "whenever"}, "invalid_input", "policy"),
        ({"session_id": "bad id"}, "invalid_session_id", "session_id"),
        ({"surprise": 1}, "invalid_input", "surprise"),
        ({"settings": {"max_parallel": 0}}, "invalid_input", "settings.max_parallel"),
        ({"settings": {"confirm_attempts": 21}}, "invalid_input", "settings.confirm_attempts"),
    ],
)
def test_bad_input_is_refused_with_a_code_and_the_field(
    changes: dict[str, Any], code: str, field: str
) -> None:
    assert rejection(notices(**changes)) == (code, field)


def test_input_that_is_not_an_object_is_refused() -> None:
    assert rejection(["ana@example.com"]) == ("invalid_input", None)


def test_recipients_the_registry_accepts_are_a_valid_plan() -> None:
    job = tt.parse_input("send_notices", notices(recipients=["a@example.com", "B@example.com"]))
    plan = {
        "recipients": job.recipients,
        "subject": job.subject,
        "body_ref": "sha256:" + "a" * 64,
        "policy": job.policy,
    }

    assert validate_document("notice_plan", plan)["recipients"] == job.recipients


def test_settings_from_app_settings_are_overridden_only_by_fields_the_input_set() -> None:
    job = tt.parse_input("send_notices", notices(settings={"confirm_interval_s": 0.5}))

    settings = tt.settings_from({"confirm_interval_s": 30, "send_attempts": 2}, job.settings)

    assert (settings.confirm_interval_s, settings.send_attempts) == (0.5, 2)
    assert settings.max_parallel == tt.NoticeSettings().max_parallel


def test_bad_app_settings_are_reported_as_settings() -> None:
    with pytest.raises(ValidationError) as caught:
        tt.settings_from({"cancel_grace_s": -1}, None)
    assert (caught.value.code, caught.value.field) == ("invalid_setting", "settings.cancel_grace_s")


def test_operation_ids_are_stable_and_bound_to_parent_recipient_and_body() -> None:
    body = "sha256:" + "b" * 64
    first = tt.notice_operation_id("p:notices", "Ana@Example.com", body)

    assert first == tt.notice_operation_id("p:notices", "ana@example.com", body)
    assert first.startswith("notice-") and len(first) <= 200
    others = {
        tt.notice_operation_id("q:notices", "ana@example.com", body),
        tt.notice_operation_id("p:notices", "bo@example.com", body),
        tt.notice_operation_id("p:notices", "ana@example.com", "sha256:" + "c" * 64),
    }
    assert first not in others and len(others) == 3


def test_plan_document_ids_are_derived_and_valid_document_ids() -> None:
    plan_id = tt.plan_document_id("s-1:turn:x:notices")

    assert plan_id == tt.plan_document_id("s-1:turn:x:notices")
    assert plan_id != tt.plan_document_id("s-1:turn:y:notices")
    assert re.fullmatch(DOCUMENT_ID_PATTERN, plan_id)


def test_a_body_given_as_text_is_stored_as_a_note_next_to_its_plan() -> None:
    plan_id = tt.plan_document_id("p:notices")

    assert re.fullmatch(DOCUMENT_ID_PATTERN, tt.body_document_id(plan_id))
    assert re.fullmatch(tt.BODY_REF_PATTERN, tt.body_document_id(plan_id))


def outcomes(*names: str) -> list[dict[str, str]]:
    return [{"recipient": f"u{i}@example.com", "outcome": n} for i, n in enumerate(names)]


def test_summary_counts_confirmed_first_and_names_why_a_run_stopped() -> None:
    assert tt.summarize(outcomes("confirmed") * 1) == "1 of 1 confirmed"
    assert tt.summarize(
        outcomes("confirmed", "rejected", "cancelled", "cancelled"),
        "failFast: u1@example.com rejected",
    ) == ("1 of 4 confirmed; 1 rejected, 2 cancelled (failFast: u1@example.com rejected)")


@pytest.mark.parametrize(
    ("names", "cancelled", "status"),
    [
        (("confirmed", "confirmed"), False, "completed"),
        (("confirmed", "rejected"), False, "failed"),
        (("confirmed", "uncertain", "rejected"), False, "interrupted"),
        (("confirmed", "cancelled"), True, "cancelled"),
        (("uncertain",), True, "cancelled"),
    ],
)
def test_final_status_lets_a_cancel_request_win_then_an_unresolved_send(
    names: tuple[str, ...], cancelled: bool, status: str
) -> None:
    assert tt.final_status(outcomes(*names), cancelled) == status


def test_every_outcome_maps_to_a_terminal_task_status() -> None:
    assert set(tt.CHILD_STATUS) == set(tt.OUTCOMES)
    assert tt.CHILD_STATUS["uncertain"] == "interrupted"


def test_error_result_says_nothing_was_sent() -> None:
    error = {"error": "body_not_found", "message": "no such body", "field": "body_ref"}

    result = tt.error_result(error)

    assert result == {
        "ok": False,
        "kind": "invalid",
        "results": [],
        "error": error,
        "summary": "nothing sent: no such body",
    }
