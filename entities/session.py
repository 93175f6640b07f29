"""The ``session`` entity: one per session id, every operation a pure reducer of ``kernel.session``.

The entity copies nothing into its state itself: it hands the stored state, the operation
and its input to ``kernel.session.apply``, sets the state once from the validated result
(only when the reducer returned a new object), and answers an envelope instead of raising,
so a failed operation changes nothing and callers can branch on the error:
``{"ok": true, "result": ...}`` or ``{"ok": false, "error": {error, message, field}, "status": 4xx}``.
Entities run once per operation (they are not replayed), so reading the clock here is safe.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import azure.durable_functions as df

from kernel import session as core
from kernel.errors import KernelError

bp = df.Blueprint()


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def handle(state: dict[str, Any] | None, session_id: str, op: str, request: Any) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """Pure step used by the entity: returns (state to set or None, envelope)."""
    now = _now()
    base = state if state is not None else core.new_state(session_id, now)
    try:
        new, result = core.apply(base, op, request if request is not None else {}, now)
    except KernelError as exc:
        return None, {"ok": False, "error": exc.to_dict(), "status": exc.http_status}
    changed = new is not state and (state is not None or op not in _READS)
    return (new if changed else None), {"ok": True, "result": result}


_READS = frozenset({"view", "changes_after", "submission_view", "is_idle"})


@bp.entity_trigger(context_name="context", entity_name="session")
def session(context: df.DurableEntityContext) -> None:
    state = context.get_state(lambda: None)
    new_state, envelope = handle(state, context.entity_key, context.operation_name, context.get_input())
    if new_state is not None:
        context.set_state(new_state)
    context.set_result(envelope)
