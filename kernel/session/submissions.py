"""Submissions and the turn queue: ``accept``, ``finish`` and ``cancel``. Pure reducers.

A submission is ``{id, request_id, text, text_ref, status, accepted_at, started_at,
finished_at, answer, turn_instance_id, entry, cancel_requested_at, cancel_reason,
finished_cursor, next_submission_id}``; status goes queued -> active -> completed | failed |
cancelled, or queued -> failed | cancelled.

Invariants (pinned by tests/unit/kernel/test_kernel_submissions.py):
* At most one submission is active (``active_submission``); the others wait in ``turn_queue``
  in acceptance order. When the active one finishes, the first queued one becomes active in the
  same operation, so the turn is never dropped nor held by two.
* ``accept`` is first-wins: the id is ``uuid5(session, request_id)``, so a retry finds the
  original and gets it back, with the input state object returned as is (``new is old``).
* ``finish`` is idempotent: finishing a finished submission returns the stored outcome (the
  first finish wins) and the state object as is.
* A finished submission's turn task is terminal too: if the turn did not close it, finishing does.
* A session belongs to the principal of its first ``accept`` when that request names an
  ``owner``; an ``accept`` naming another principal (or none, with ``owner: null``) is refused
  as ``session_not_found``, exactly like a session that does not exist. A request without the
  key is not checked: the API sends it only when principals are trusted.
* ``cancel`` of a queued submission cancels it outright; of an active one it records the intent
  (``cancel_requested_at``) and the caller raises ``cancel:{turn_instance_id}``: the turn stops
  cooperatively and finishes itself as ``cancelled``.
"""

from __future__ import annotations

from typing import Any

from kernel.common import ids
from kernel.common.errors import ConflictError, NotFoundError, ValidationError
from kernel.common.statuses import FINAL_SUBMISSION_STATUSES, SubmissionStatus
from kernel.session.changes import record_change
from kernel.session.entries import append_entry
from kernel.session.requests import AcceptRequest, CancelRequest, FinishRequest, TaskPatch, parse
from kernel.session.state import MAIN_CONVERSATION, State, upgrade, validate_timestamp, working_copy
from kernel.session.tasks import close_task, upsert_task

MAX_QUEUED_SUBMISSIONS = 100

Result = dict[str, Any]


def check_owner(state: State | None, request: object) -> None:
    """Refuse an ``accept`` whose ``owner`` is not the session's, as if it did not exist."""
    if state is None or not isinstance(request, dict) or "owner" not in request:
        return
    owner = state.get("owner")
    if owner is not None and request["owner"] != owner:
        raise NotFoundError("session_not_found", "the session does not exist", "session_id")


def accept(state: State, request: object, now: str) -> tuple[State, Result]:
    at = validate_timestamp(now)
    req = parse(AcceptRequest, request)
    current = upgrade(state)
    check_owner(current, request)
    sub_id = ids.submission_id(current["session_id"], req.request_id)
    if req.submission_id is not None and req.submission_id != sub_id:
        raise ValidationError(
            "submission_id_mismatch", "not the id derived from request_id", "submission_id"
        )
    existing = current["submissions"].get(sub_id)
    if existing is not None:
        return current, {
            "submission_id": sub_id,
            "status": existing["status"],
            "duplicate": True,
            "position": position(current, sub_id),
        }
    if len(current["turn_queue"]) >= MAX_QUEUED_SUBMISSIONS:
        raise ConflictError("queue_full", f"{MAX_QUEUED_SUBMISSIONS} submissions already wait")
    new = working_copy(current)
    if req.owner is not None and current["cursor"] == 0:  # the session's first submission
        new["owner"] = req.owner
    items = _open_submission(new, sub_id, req, at)
    cursor = record_change(new, op="accept", at=at, items=items)
    sub = new["submissions"][sub_id]
    return new, {
        "submission_id": sub_id,
        "status": sub["status"],
        "duplicate": False,
        "active": sub["status"] == SubmissionStatus.ACTIVE,
        "position": position(new, sub_id),
        "turn_instance_id": sub["turn_instance_id"],
        "entry": sub["entry"],
        "cursor": cursor,
    }


def _open_submission(state: State, sub_id: str, req: AcceptRequest, at: str) -> list[Any]:
    inline = req.text if req.text_ref is None else None
    items = append_entry(
        state, conversation=MAIN_CONVERSATION, role="user", kind="message", text=inline,
        content_ref=req.text_ref, data=None, submission_id=sub_id, at=at,
    )  # fmt: skip
    turn_id = ids.turn_instance_id(state["session_id"], sub_id)
    items.append(upsert_task(state, TaskPatch(id=turn_id, kind="turn"), at=at, field="task"))
    active = state["active_submission"] is None
    status = SubmissionStatus.ACTIVE if active else SubmissionStatus.QUEUED
    state["submissions"][sub_id] = {
        "id": sub_id, "request_id": req.request_id, "text": inline, "text_ref": req.text_ref,
        "status": status, "accepted_at": at,
        "started_at": at if active else None, "finished_at": None, "answer": None,
        "turn_instance_id": turn_id, "entry": state["entries"][-1]["n"],
        "cancel_requested_at": None, "cancel_reason": None,
        "finished_cursor": None, "next_submission_id": None,
    }  # fmt: skip
    if active:
        state["active_submission"] = sub_id
    else:
        state["turn_queue"].append(sub_id)
    items.append(submission_item(state["submissions"][sub_id]))
    return items


def finish(state: State, request: object, now: str) -> tuple[State, Result]:
    at = validate_timestamp(now)
    req = parse(FinishRequest, request)
    current = upgrade(state)
    sub = find_submission(current, req.submission_id)
    if sub["status"] in FINAL_SUBMISSION_STATUSES:
        return current, _finish_result(sub, duplicate=True)
    new = working_copy(current)
    items = finish_submission(new, req.submission_id, req.status, req.answer, at=at)
    record_change(new, op="finish", at=at, items=items)
    return new, _finish_result(new["submissions"][req.submission_id], duplicate=False)


def _finish_result(sub: dict[str, Any], *, duplicate: bool) -> Result:
    return {
        "submission_id": sub["id"],
        "status": sub["status"],
        "next_submission_id": sub["next_submission_id"],
        "cursor": sub["finished_cursor"],
        "duplicate": duplicate,
    }


def finish_submission(
    state: State, sub_id: str, status: str, answer: str | None, *, at: str,
    reason: str | None = None, field: str = "status",
) -> list[dict[str, Any]]:  # fmt: skip
    """Make an open submission final in ``state`` (a working copy) and hand the turn over."""
    sub = state["submissions"][sub_id]
    was_active = state["active_submission"] == sub_id
    if not was_active and status == SubmissionStatus.COMPLETED:
        raise ConflictError("not_active", "only the active submission can complete", field)
    sub.update(status=status, finished_at=at, finished_cursor=state["cursor"] + 1)
    if answer is not None:
        sub["answer"] = answer
    items = [submission_item(sub)]
    turn = state["tasks"][sub["turn_instance_id"]]
    if close_task(turn, status, at=at, reason=reason):
        items.append({"type": "task", "id": turn["id"], "status": status, "phase": turn["phase"]})
    if not was_active:
        state["turn_queue"].remove(sub_id)
        return items
    queue = state["turn_queue"]
    following = queue.pop(0) if queue else None
    state["active_submission"] = following
    sub["next_submission_id"] = following
    if following is not None:
        state["submissions"][following].update(status=SubmissionStatus.ACTIVE, started_at=at)
        items.append(submission_item(state["submissions"][following]))
    return items


def cancel(state: State, request: object, now: str) -> tuple[State, Result]:
    at = validate_timestamp(now)
    req = parse(CancelRequest, request)
    current = upgrade(state)
    sub = find_submission(current, req.submission_id)
    if sub["status"] in FINAL_SUBMISSION_STATUSES or sub["cancel_requested_at"] is not None:
        return current, _cancel_result(sub, current["cursor"], changed=False)
    new = working_copy(current)
    sub = new["submissions"][req.submission_id]
    sub.update(cancel_requested_at=at, cancel_reason=req.reason)
    if sub["status"] == SubmissionStatus.QUEUED:
        cancelled = SubmissionStatus.CANCELLED
        items = finish_submission(new, sub["id"], cancelled, None, at=at, reason=req.reason)
    else:
        items = [submission_item(sub)]
    cursor = record_change(new, op="cancel", at=at, items=items)
    return new, _cancel_result(sub, cursor, changed=True)


def _cancel_result(sub: dict[str, Any], cursor: int, *, changed: bool) -> Result:
    # While status is "active" and cancel_requested is true the caller (re)raises the turn's
    # cancel event; raising it again after a lost attempt is harmless, never raising it is not.
    return {
        "submission_id": sub["id"],
        "status": sub["status"],
        "cancel_requested": sub["cancel_requested_at"] is not None,
        "turn_instance_id": sub["turn_instance_id"],
        "cursor": cursor,
        "changed": changed,
    }


def find_submission(state: State, sub_id: str, field: str = "submission_id") -> dict[str, Any]:
    sub = state["submissions"].get(sub_id)
    if sub is None:
        raise NotFoundError("submission_not_found", f"no submission {sub_id!r}", field)
    return sub


def position(state: State, sub_id: str) -> int | None:
    """0 for the active submission, 1.. for queued ones (1 = next), None once finished."""
    if state["active_submission"] == sub_id:
        return 0
    queue: list[str] = state["turn_queue"]
    return queue.index(sub_id) + 1 if sub_id in queue else None


def submission_item(sub: dict[str, Any]) -> dict[str, Any]:
    item = {"type": "submission", "id": sub["id"], "status": sub["status"]}
    if sub["cancel_requested_at"] is not None:
        item["cancel_requested"] = True
    return item
