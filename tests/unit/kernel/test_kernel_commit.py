import json
from typing import Any

import pytest

from kernel.common import ids
from kernel.common.content import content_ref
from kernel.common.errors import ConflictError, KernelError, NotFoundError, ValidationError
from kernel.session import reducer as session

T0 = "2025-01-01T00:00:00Z"
T1 = "2025-01-01T00:00:01Z"
SUB1 = ids.submission_id("s1", "r1")
SUB2 = ids.submission_id("s1", "r2")
TURN1 = ids.turn_instance_id("s1", SUB1)
NOTE = {"title": "Draft", "text": "Dear customer"}


def two_submissions() -> dict[str, Any]:
    state = session.new_state("s1", T0)
    for request_id in ("r1", "r2"):
        state, _ = session.accept(state, {"request_id": request_id, "text": request_id}, T0)
    return state


def rejects(state: dict[str, Any], request: object) -> KernelError:
    before = json.dumps(state)
    with pytest.raises(KernelError) as caught:
        session.commit(state, request, T1)
    assert json.dumps(state) == before
    return caught.value


def test_a_commit_applies_every_part_and_bumps_the_cursor_once() -> None:
    state = two_submissions()

    new, result = session.commit(
        state,
        {
            "submission_id": SUB1,
            "entries": [{"role": "assistant", "text": "Sending."},
                        {"role": "tool", "kind": "tool_result", "data": {"ok": True}}],
            "documents": [{"id": "draft", "type": "note", "data": NOTE}],
            "tasks": [{"id": TURN1, "status": "running", "phase": "tools"}],
        },
        T1,
    )  # fmt: skip

    assert result == {"cursor": 3, "entry_numbers": [3, 4], "document_versions": {"draft": 1},
                      "next_submission_id": None}  # fmt: skip
    assert new["cursor"] == state["cursor"] + 1
    assert [e["submission_id"] for e in new["entries"][2:]] == [SUB1, SUB1]
    assert new["documents"]["draft"] == {"type": "note", "version": 1, "data": NOTE,
                                         "updated_at": T1}  # fmt: skip
    assert (new["tasks"][TURN1]["status"], new["tasks"][TURN1]["phase"]) == ("running", "tools")
    assert new["changes"][-1]["kinds"] == ["entry", "document", "task"]


def test_one_bad_document_among_good_entries_changes_nothing() -> None:
    state = two_submissions()

    error = rejects(
        state,
        {
            "submission_id": SUB1,
            "entries": [{"role": "assistant", "text": "fine"}] * 3,
            "documents": [
                {"id": "good", "type": "note", "data": NOTE},
                {"id": "bad", "type": "notice_plan",
                 "data": {"recipients": ["x@example.com", "nope"], "subject": "S",
                          "body_ref": "good"}},
            ],
        },
    )  # fmt: skip

    assert (type(error), error.field) == (ValidationError, "documents[1].data.recipients[1]")


@pytest.mark.parametrize(
    ("request_", "code", "field"),
    [
        ({}, "empty_commit", None),
        ({"entries": [{"role": "robot", "text": "x"}]}, "invalid_request", "entries[0].role"),
        ({"entries": [{"role": "tool", "text": "x" * 4097}]}, "text_too_long", "entries[0].text"),
        ({"entries": [{"role": "tool", "text": "x", "content_ref": content_ref("x")}]},
         "ambiguous_body", "entries[0].text"),
        ({"entries": [{"role": "tool", "data": {"blob": "x" * 17_000}}]}, "data_too_large",
         "entries[0].data"),
        ({"documents": [{"id": "d", "type": "sheet", "data": {}}]}, "unknown_document_type",
         "documents[0].type"),
        ({"documents": [{"id": "d", "type": "json", "data": 1}] * 2}, "duplicate_document",
         "documents"),
        ({"documents": [{"id": "a/b", "type": "json", "data": 1}]}, "invalid_request",
         "documents[0].id"),
        ({"tasks": [{"id": "t", "kind": "tool", "children": []}]}, "invalid_request",
         "tasks[0].children"),
        ({"tasks": [{"id": "@t", "kind": "tool"}]}, "invalid_instance_id", "tasks[0].id"),
        ({"submission": {"status": "completed"}}, "missing_submission_id", "submission.id"),
        ({"submission_id": SUB1, "submission": {"id": SUB2, "status": "failed"}},
         "submission_mismatch", "submission.id"),
        ({"submission_id": SUB1, "submission": {"status": "queued"}}, "invalid_request",
         "submission.status"),
    ],
)  # fmt: skip
def test_malformed_commits_name_the_field(request_: Any, code: str, field: str | None) -> None:
    error = rejects(two_submissions(), request_)

    assert (type(error), error.code, error.field) == (ValidationError, code, field)


def test_large_content_is_committed_by_reference() -> None:
    ref = content_ref("x" * 10_000)

    state, _ = session.commit(
        two_submissions(), {"entries": [{"role": "tool", "content_ref": ref}]}, T1
    )

    assert (state["entries"][-1]["text"], state["entries"][-1]["content_ref"]) == (None, ref)


def test_documents_are_versioned_and_their_history_kept() -> None:
    state = two_submissions()
    change = {"id": "draft", "type": "note", "data": NOTE}

    state, first = session.commit(state, {"documents": [change]}, T1)
    state, second = session.commit(state, {"documents": [change | {"expected_version": 1}]}, T1)

    assert (first["document_versions"], second["document_versions"]) == ({"draft": 1}, {"draft": 2})
    assert state["document_history"] == [
        {"id": "draft", "version": 1, "cursor": 3, "op": "create"},
        {"id": "draft", "version": 2, "cursor": 4, "op": "update"},
    ]


def test_a_stale_expected_version_is_a_conflict() -> None:
    state, _ = session.commit(
        two_submissions(), {"documents": [{"id": "d", "type": "json", "data": 1}]}, T1
    )

    error = rejects(state, {"documents": [{"id": "d", "type": "json", "data": 2,
                                           "expected_version": 0}]})  # fmt: skip

    assert (type(error), error.code, error.field) == (
        ConflictError, "version_conflict", "documents[0].expected_version",
    )  # fmt: skip


def test_expected_version_zero_creates_only() -> None:
    _, result = session.commit(
        two_submissions(),
        {"documents": [{"id": "d", "type": "json", "data": 1, "expected_version": 0}]}, T1,
    )  # fmt: skip

    assert result["document_versions"] == {"d": 1}


def test_a_document_keeps_its_type() -> None:
    state, _ = session.commit(
        two_submissions(), {"documents": [{"id": "d", "type": "json", "data": {}}]}, T1
    )

    error = rejects(state, {"documents": [{"id": "d", "type": "note", "data": NOTE}]})

    assert (type(error), error.code) == (ConflictError, "document_type_mismatch")


def test_committing_a_final_status_finishes_and_hands_over() -> None:
    state = two_submissions()

    state, result = session.commit(
        state,
        {"submission_id": SUB1, "entries": [{"role": "assistant", "text": "Done."}],
         "submission": {"status": "completed", "answer": "Done."}},
        T1,
    )  # fmt: skip

    assert result["next_submission_id"] == SUB2
    assert (state["submissions"][SUB1]["status"], state["submissions"][SUB1]["answer"]) == (
        "completed", "Done.",
    )  # fmt: skip
    assert state["active_submission"] == SUB2
    assert state["tasks"][TURN1]["status"] == "completed"


def test_an_answer_alone_leaves_the_submission_active() -> None:
    state, result = session.commit(
        two_submissions(), {"submission": {"id": SUB1, "answer": "so far"}}, T1
    )

    assert (state["submissions"][SUB1]["status"], state["submissions"][SUB1]["answer"]) == (
        "active", "so far",
    )  # fmt: skip
    assert result["next_submission_id"] is None


def test_nothing_can_be_written_for_a_finished_submission() -> None:
    state, _ = session.finish(two_submissions(), {"submission_id": SUB1, "status": "cancelled"}, T1)

    error = rejects(state, {"submission_id": SUB1, "entries": [{"role": "tool", "text": "late"}]})

    assert (type(error), error.code, error.field) == (
        ConflictError, "submission_finished", "submission_id",
    )  # fmt: skip


def test_an_unknown_submission_is_not_found() -> None:
    error = rejects(
        two_submissions(), {"submission_id": "nope", "entries": [{"role": "tool", "text": "x"}]}
    )

    assert (type(error), error.field) == (NotFoundError, "submission_id")


def test_a_new_conversation_is_created_by_its_first_entry() -> None:
    state, _ = session.commit(
        two_submissions(),
        {"entries": [{"conversation": "research", "role": "system", "text": "x"}]},
        T1,
    )

    assert set(state["conversations"]) == {"main", "research"}
    assert state["changes"][-1]["kinds"] == ["conversation", "entry"]
