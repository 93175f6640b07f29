"""The ``session`` entity: one per session id, every operation a pure reducer of ``kernel.session``.

The entity copies nothing into its state itself: it hands the stored state, the operation
and its input to ``kernel.session.apply``, sets the state once from the validated result
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
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import azure.durable_functions as df

from adapters.content_store import ContentNotFound, default_store
from kernel import session as core
from kernel.errors import ConflictError, KernelError, NotFoundError, ValidationError

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
    """Pure step of the entity (apart from reading a referenced text for ``accept``)."""
    now = now or _now()
    try:
        if op == "delete":
            return _delete(state, request)
        if op == "accept":
            request = with_referenced_text(request)
        base = state if state is not None else core.new_state(session_id, now)
        new, result = core.apply(base, op, request if request is not None else {}, now)
    except KernelError as exc:
        return _failure(exc)
    changed = new is not state and (state is not None or op not in _READS)
    return Outcome(new if changed else None, {"ok": True, "result": result})


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
