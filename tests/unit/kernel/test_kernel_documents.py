from typing import Any

import pytest

from kernel.common.content import content_ref
from kernel.common.errors import ValidationError
from kernel.session.documents import DOCUMENT_TYPES, MAX_DOCUMENT_BYTES, validate_document


def plan(**overrides: Any) -> dict[str, Any]:
    return {"recipients": ["a@example.com", "b@example.org"], "subject": "Notice",
            "body_ref": "approved-body", **overrides}  # fmt: skip


def failure(doc_type: str, data: object) -> ValidationError:
    with pytest.raises(ValidationError) as caught:
        validate_document(doc_type, data)
    return caught.value


def test_registry_has_the_required_types() -> None:
    assert {"note", "notice_plan", "json"} <= set(DOCUMENT_TYPES)


def test_a_note_is_title_and_text() -> None:
    assert validate_document("note", {"title": "T", "text": ""}) == {"title": "T", "text": ""}


def test_unknown_fields_are_errors_not_dropped() -> None:
    assert failure("note", {"title": "T", "text": "x", "titel": "typo"}).field == "data.titel"


def test_types_are_strict() -> None:
    assert failure("note", {"title": 5, "text": "x"}).field == "data.title"


def test_a_notice_plan_gets_its_defaults() -> None:
    data = validate_document("notice_plan", plan(body_ref=content_ref("body")))

    assert (data["policy"], data["receipts"]) == ("allSettled", {})


@pytest.mark.parametrize(
    ("data", "field"),
    [
        (plan(recipients=["a@example.com", "not-an-address"]), "data.recipients[1]"),
        (plan(recipients=["a@example.com", "A@Example.com"]), "data.recipients[1]"),
        (plan(recipients=[]), "data.recipients"),
        (plan(recipients=[f"u{i}@example.com" for i in range(51)]), "data.recipients"),
        (plan(policy="oneByOne"), "data.policy"),
        (plan(subject=""), "data.subject"),
        (plan(body_ref="sha256:xyz"), "data.body_ref"),
        (plan(receipts={"c@example.com": {"id": "m1"}}), "data.receipts"),
        ({"recipients": ["a@example.com"], "subject": "S"}, "data.body_ref"),
    ],
)
def test_notice_plan_failures_name_the_field(data: dict[str, Any], field: str) -> None:
    assert failure("notice_plan", data).field == field


def test_notice_plan_accepts_receipts_for_its_recipients() -> None:
    receipts = {"a@example.com": {"operation_id": "op-1", "status": "accepted"}}

    assert validate_document("notice_plan", plan(receipts=receipts))["receipts"] == receipts


def test_json_documents_hold_any_json() -> None:
    assert validate_document("json", [1, {"a": None}]) == [1, {"a": None}]


def test_unknown_type_names_the_type_field() -> None:
    error = failure("spreadsheet", {})

    assert (error.code, error.field) == ("unknown_document_type", "type")


def test_documents_are_bounded_in_size() -> None:
    error = failure("json", {"blob": "x" * MAX_DOCUMENT_BYTES})

    assert (error.code, error.field) == ("document_too_large", "data")
