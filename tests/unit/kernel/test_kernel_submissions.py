import json
from typing import Any

import pytest

from kernel.common import ids
from kernel.common.content import content_ref
from kernel.common.errors import ConflictError, KernelError, NotFoundError, ValidationError
from kernel.session import reducer as session
from kernel.session import submissions

T0 = "2025-01-01T00:00:00Z"
T1 = "2025-01-01T00:00:01Z"


def fresh() -> dict[str, Any]:
    return session.new_state("s1", T0)


def accept_all(state: dict[str, Any], *request_ids: str) -> dict[str, Any]:
    for request_id in request_ids:
        state, _ = session.accept(state, {"request_id": request_id, "text": request_id}, T0)
    return state


def sid(request_id: str) -> str:
    return ids.submission_id("s1", request_id)


def rejects(state: dict[str, Any], op: str, request: object) -> KernelError:
    before = json.dumps(state)
    with pytest.raises(KernelError) as caught:
        session.apply(state, op, request, T1)
    assert json.dumps(state) == before
    return caught.value


def test_first_accept_makes_the_submission_active() -> None:
    state, result = session.accept(fresh(), {"request_id": "r1", "text": "hello"}, T0)

    assert result == {
        "submission_id": sid("r1"), "status": "active", "duplicate": False, "active": True,
        "position": 0, "turn_instance_id": ids.turn_instance_id("s1", sid("r1")), "entry": 1,
        "cursor": 1,
    }  # fmt: skip
    assert state["active_submission"] == sid("r1")
    assert state["entries"][0] | {"at": None} == {
        "n": 1, "conversation": "main", "role": "user", "kind": "message", "text": "hello",
        "content_ref": None, "data": None, "submission_id": sid("r1"), "at": None,
    }  # fmt: skip
    assert state["tasks"][result["turn_instance_id"]]["status"] == "pending"


def test_a_retried_accept_returns_the_original_and_changes_nothing() -> None:
    state = accept_all(fresh(), "r1", "r2")

    again, result = session.accept(state, {"request_id": "r2", "text": "different text"}, T1)

    assert again is state
    assert result == {"submission_id": sid("r2"), "status": "queued", "duplicate": True,
                      "position": 1}  # fmt: skip
    assert state["submissions"][sid("r2")]["text"] == "r2"


def test_a_retry_after_the_submission_finished_still_finds_it() -> None:
    state = accept_all(fresh(), "r1")
    state, _ = session.finish(state, {"submission_id": sid("r1"), "status": "completed"}, T1)

    again, result = session.accept(state, {"request_id": "r1", "text": "r1"}, T1)

    assert again is state
    assert (result["status"], result["position"]) == ("completed", None)


def test_accept_checks_a_given_submission_id_against_the_derived_one() -> None:
    good = {"request_id": "r1", "text": "x", "submission_id": sid("r1")}
    assert session.accept(fresh(), good, T0)[1]["submission_id"] == sid("r1")

    error = rejects(fresh(), "accept", {**good, "submission_id": sid("r2")})

    assert (error.code, error.field) == ("submission_id_mismatch", "submission_id")


@pytest.mark.parametrize(
    ("request_", "code", "field"),
    [
        ({"request_id": "", "text": "x"}, "invalid_request_id", "request_id"),
        ({"request_id": "a\x00", "text": "x"}, "invalid_request_id", "request_id"),
        ({"request_id": "r", "text": ""}, "empty_text", "text"),
        ({"request_id": "r", "text": " \n\t"}, "empty_text", "text"),
        ({"request_id": "r", "text": "x" * 32_001}, "text_too_long", "text"),
        ({"request_id": "r", "text": "x" * 5_000}, "text_ref_required", "text_ref"),
        ({"request_id": "r", "text": "x", "text_ref": content_ref("y")}, "text_ref_mismatch",
         "text_ref"),
        ({"request_id": "r"}, "invalid_request", "text"),
        ({"request_id": 5, "text": "x"}, "invalid_request", "request_id"),
    ],
)  # fmt: skip
def test_invalid_accepts_name_the_field(request_: dict[str, Any], code: str, field: str) -> None:
    error = rejects(fresh(), "accept", request_)

    assert (type(error), error.code, error.field) == (ValidationError, code, field)


def test_a_long_text_is_kept_by_reference_only() -> None:
    text = "x" * 32_000

    state, _ = session.accept(
        fresh(), {"request_id": "r", "text": text, "text_ref": content_ref(text)}, T0
    )

    entry, sub = state["entries"][0], state["submissions"][sid("r")]
    assert (entry["text"], entry["content_ref"]) == (None, content_ref(text))
    assert (sub["text"], sub["text_ref"]) == (None, content_ref(text))


def test_queued_submissions_keep_acceptance_order() -> None:
    state = accept_all(fresh(), "r1", "r2", "r3")

    assert state["turn_queue"] == [sid("r2"), sid("r3")]
    assert [submissions.position(state, sid(r)) for r in ("r1", "r2", "r3")] == [0, 1, 2]


def test_finish_hands_the_turn_to_the_next_in_order() -> None:
    state = accept_all(fresh(), "r1", "r2", "r3")
    handed = []

    for request_id in ("r1", "r2", "r3"):
        state, result = session.finish(
            state, {"submission_id": sid(request_id), "status": "completed", "answer": "ok"}, T1
        )
        handed.append(result["next_submission_id"])

    assert handed == [sid("r2"), sid("r3"), None]
    assert session.is_idle(state)
    assert state["submissions"][sid("r2")]["started_at"] == T1


def test_finish_closes_the_turn_task_with_the_same_status() -> None:
    state = accept_all(fresh(), "r1")

    state, _ = session.finish(state, {"submission_id": sid("r1"), "status": "failed"}, T1)

    assert state["tasks"][ids.turn_instance_id("s1", sid("r1"))]["status"] == "failed"


def test_finishing_twice_returns_the_first_outcome_unchanged() -> None:
    state = accept_all(fresh(), "r1", "r2")
    state, first = session.finish(state, {"submission_id": sid("r1"), "status": "completed"}, T1)

    again, second = session.finish(state, {"submission_id": sid("r1"), "status": "failed"}, T1)

    assert again is state
    assert second == first | {"duplicate": True}
    assert second["status"] == "completed"


def test_only_the_active_submission_can_complete() -> None:
    state = accept_all(fresh(), "r1", "r2")

    error = rejects(state, "finish", {"submission_id": sid("r2"), "status": "completed"})

    assert (type(error), error.code) == (ConflictError, "not_active")


def test_a_queued_submission_can_fail_and_leaves_the_queue() -> None:
    state = accept_all(fresh(), "r1", "r2", "r3")

    state, result = session.finish(state, {"submission_id": sid("r2"), "status": "failed"}, T1)

    assert result["next_submission_id"] is None
    assert (state["active_submission"], state["turn_queue"]) == (sid("r1"), [sid("r3")])


def test_finish_of_an_unknown_submission_is_not_found() -> None:
    error = rejects(fresh(), "finish", {"submission_id": "nope", "status": "completed"})

    assert (type(error), error.field) == (NotFoundError, "submission_id")


def test_cancelling_a_queued_submission_cancels_it_at_once() -> None:
    state = accept_all(fresh(), "r1", "r2")

    state, result = session.cancel(state, {"submission_id": sid("r2"), "reason": "user"}, T1)

    assert (result["status"], result["changed"]) == ("cancelled", True)
    assert state["turn_queue"] == []
    turn = state["tasks"][ids.turn_instance_id("s1", sid("r2"))]
    assert (turn["status"], turn["reason"]) == ("cancelled", "user")


def test_cancelling_the_active_submission_records_the_intent_once() -> None:
    state = accept_all(fresh(), "r1")

    state, first = session.cancel(state, {"submission_id": sid("r1")}, T1)
    again, second = session.cancel(state, {"submission_id": sid("r1")}, T1)

    assert (first["status"], first["cancel_requested"], first["changed"]) == ("active", True, True)
    assert first["turn_instance_id"] == ids.turn_instance_id("s1", sid("r1"))
    assert again is state
    assert (second["cancel_requested"], second["changed"]) == (True, False)


def test_the_turn_completes_a_requested_cancellation_by_finishing() -> None:
    state = accept_all(fresh(), "r1")
    state, _ = session.cancel(state, {"submission_id": sid("r1")}, T1)

    state, result = session.finish(state, {"submission_id": sid("r1"), "status": "cancelled"}, T1)

    assert result["status"] == "cancelled"
    assert session.cancel(state, {"submission_id": sid("r1")}, T1)[0] is state


def test_the_queue_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(submissions, "MAX_QUEUED_SUBMISSIONS", 2)
    state = accept_all(fresh(), "r1", "r2", "r3")

    error = rejects(state, "accept", {"request_id": "r4", "text": "x"})

    assert (type(error), error.code) == (ConflictError, "queue_full")


def test_submission_view_adds_the_queue_position() -> None:
    state = accept_all(fresh(), "r1", "r2")

    view = session.submission_view(state, sid("r2"))

    assert (view["status"], view["position"], view["request_id"]) == ("queued", 1, "r2")
    with pytest.raises(NotFoundError):
        session.submission_view(state, "missing")
