"""The ``session`` entity: one per session id, every operation a pure reducer of ``kernel.session.reducer``.

The entity copies nothing into its state itself: it hands the stored state, the operation
and its input to ``kernel.session.reducer.apply``, sets the state once from the validated result
(only when the reducer returned a new object), and answers an envelope instead of raising,
so a failed operation changes nothing and callers can branch on the error:
``{"ok": true, "result": ...}`` or ``{"ok": false, "error": {error, message, field}, "status": 4xx}``.
Entities run once per operation (they are not replayed), so reading the clock here is safe.

Beyond the kernel's operations the entity knows two things the kernel cannot:
* ``accept`` with a ``text_ref`` and no ``text`` reads the text from the content store, so an
  orchestration can submit a long text by reference and its history stays small; the kernel
  still checks that the reference is the text's own.
* ``delete {cursor?}`` removes the session (the entity ceases to exist), but only while it is
  idle and, when ``cursor`` is given, still at that cursor: a deleter that checked the session
  at cursor N never deletes a session that accepted something after N.

A session exists from its first successful mutating operation on. Reads, failed operations
and ``delete`` of an absent session never create it.

**Sealing.** After every write the entity asks the kernel which old records to seal
(``kernel.session.pages.seal``: pure, it returns the new head and the page texts). It stores the pages
in the content store and, for every sealed submission, a marker (``pages.submission_marker``),
*then* sets the head: the atomic commit is still one state write, and it never references a
page that is not durable. So each operation reads and writes the small head, not the session.

**Sealed submissions.** ``accept``, ``finish``, ``cancel`` and ``submission_view`` of a
submission that is no longer in the head look its marker up (one content-store read, so a new
submission costs no page scan) and, when it exists, answer from its sealed record exactly as
the kernel answers for a final submission: a retried request id is still a duplicate.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import azure.durable_functions as df

from adapters.content_store import ContentNotFound, default_store
from entities import session_pages
from kernel.common import ids
from kernel.common.errors import ConflictError, KernelError, NotFoundError, ValidationError
from kernel.common.statuses import FINAL_SUBMISSION_STATUSES
from kernel.session import pages
from kernel.session import reducer as core
from kernel.session.submissions import check_owner

bp = df.Blueprint()

_READS = frozenset({"view", "changes_after", "submission_view", "is_idle"})


@dataclass(frozen=True)
class Outcome:
    """What one operation decides: the state to set (None: keep), the answer, and whether the
    entity ceases to exist after answering."""

    state: dict[str, Any] | None
    envelope: dict[str, Any]
    delete: bool = False


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _failure(exc: KernelError) -> Outcome:
    return Outcome(None, {"ok": False, "error": exc.to_dict(), "status": exc.http_status})


def handle(
    state: dict[str, Any] | None, session_id: str, op: str, request: Any, now: str | None = None
) -> Outcome:
    """One step of the entity. Its IO is the content store only: a referenced text for
    ``accept``, sealed pages it reads, and the pages and markers it stores before it returns
    the head that references them (a store failure raises, and nothing is set)."""
    now = now or _now()
    try:
        if op == "delete":
            return _delete(state, request)
        if op == "accept":
            check_owner(state, request)  # before a sealed duplicate could answer
            request = with_referenced_text(request)
        sealed = _sealed_answer(state, op, request)
        if sealed is not None:
            return Outcome(None, {"ok": True, "result": sealed})
        base = state if state is not None else core.new_state(session_id, now)
        if op == "commit":
            base = with_named_documents(base, request)
        new, result = core.apply(base, op, request if request is not None else {}, now)
    except KernelError as exc:
        return _failure(exc)
    changed = new is not state and (state is not None or op not in _READS)
    if not changed:
        return Outcome(None, {"ok": True, "result": result})
    return Outcome(sealed_head(new), {"ok": True, "result": result})


def with_named_documents(state: dict[str, Any], request: Any) -> dict[str, Any]:
    """The state with the documents a commit names put back from their bucket pages, so the
    reducer checks versions and types against them (``kernel.session.pages.with_documents``)."""
    if not isinstance(request, dict) or not isinstance(request.get("documents"), list):
        return state
    named = [
        d["id"]
        for d in request["documents"]
        if isinstance(d, dict) and isinstance(d.get("id"), str)
    ]
    if not named or not state.get("document_buckets"):
        return state
    return pages.with_documents(core.upgrade(state), named, session_pages.load_page)


def sealed_head(state: dict[str, Any]) -> dict[str, Any]:
    """``state`` with its old records sealed; the pages and markers are durable on return."""
    head, texts = core.seal(state, session_pages.page_size(), session_pages.load_page)
    if not texts:
        return head
    session_pages.store_pages(texts)
    store = default_store()
    for sub_id in set(state["submissions"]) - set(head["submissions"]):
        store.put(pages.submission_marker(head, sub_id))
    return head


def _target_submission(state: dict[str, Any], op: str, request: Any) -> str | None:
    """The id of a submission ``op`` names that the head does not hold, if it may be sealed."""
    if op not in ("accept", "finish", "cancel", "submission_view") or not isinstance(request, dict):
        return None
    if op == "accept":
        request_id = request.get("request_id")
        try:
            sub_id: str | None = ids.submission_id(
                state["session_id"], ids.validate_request_id(request_id)
            )
        except KernelError:
            return None
    else:
        sub_id = request.get("submission_id")
    if not isinstance(sub_id, str) or sub_id in state.get("submissions", {}):
        return None
    return sub_id


def _sealed_answer(state: dict[str, Any] | None, op: str, request: Any) -> Any:
    """The answer for a sealed submission, or None when the kernel should answer."""
    if state is None or not (state.get("counts") or {}).get("sealed_submissions"):
        return None
    sub_id = _target_submission(state, op, request)
    record = None if sub_id is None else session_pages.sealed_submission(state, sub_id)
    if sub_id is None or record is None:
        return None
    sub = record["submission"]
    if sub["status"] not in FINAL_SUBMISSION_STATUSES:  # only settled submissions are sealed
        return None
    if op == "accept":
        return {
            "submission_id": sub_id,
            "status": sub["status"],
            "duplicate": True,
            "position": None,
        }
    if op == "finish":
        return {
            "submission_id": sub_id, "status": sub["status"],
            "next_submission_id": sub["next_submission_id"], "cursor": sub["finished_cursor"],
            "duplicate": True,
        }  # fmt: skip
    if op == "cancel":
        return {
            "submission_id": sub_id, "status": sub["status"],
            "cancel_requested": sub["cancel_requested_at"] is not None,
            "turn_instance_id": sub["turn_instance_id"], "cursor": state["cursor"],
            "changed": False,
        }  # fmt: skip
    return {**sub, "position": None}


def _delete(state: dict[str, Any] | None, request: Any) -> Outcome:
    if request is not None and not isinstance(request, dict):
        raise ValidationError("invalid_request", "the request must be a JSON object")
    expected = (request or {}).get("cursor")
    if state is None:
        raise NotFoundError("session_not_found", "the session does not exist", None)
    if expected is not None and expected != state.get("cursor"):
        raise ConflictError("session_changed", "the session changed since it was read", "cursor")
    if not core.is_idle(state):
        raise ConflictError("session_busy", "a submission is active or queued", None)
    return Outcome(
        None, {"ok": True, "result": {"deleted": True, "cursor": state["cursor"]}}, delete=True
    )


def with_referenced_text(request: Any) -> Any:
    """An ``accept`` request that names its text only by ``text_ref`` gets the stored text."""
    if not isinstance(request, dict) or request.get("text") is not None:
        return request
    ref = request.get("text_ref")
    if not isinstance(ref, str):
        return request
    try:
        return {**request, "text": default_store().get(ref)}
    except ContentNotFound as exc:
        raise NotFoundError(
            "content_not_found", "no stored content for text_ref", "text_ref"
        ) from exc


@bp.entity_trigger(context_name="context", entity_name="session")
def session(context: df.DurableEntityContext) -> None:
    state = context.get_state(lambda: None)
    outcome = handle(state, context.entity_key, context.operation_name, context.get_input())
    if outcome.state is not None:
        context.set_state(outcome.state)
    context.set_result(outcome.envelope)
    # set_result marks the entity as existing, so the decision to not exist comes after it.
    if outcome.delete or (state is None and outcome.state is None):
        context.destruct_on_exit()
