"""What every orchestrator of the app shares: small deterministic steps and helpers.

* ``session_entity``: the ``session`` entity of a session id.
* ``set_status``: the bounded custom status of the turn's orchestrators (``{"phase", ...}``,
  fields that are None left out, at most ``STATUS_LIMIT`` bytes, never empty);
  ``set_phase``: ``{"phase", ...}`` exactly as given, for the small fixed statuses of
  ``agent_turn`` and the notices workflow.
* ``event_payload``: an external event's payload as an object (SDK #295), ``error_text``: the
  error of an entity envelope as one line.
* ``turn_patch``: a task patch of the turn task, shared by ``agent_run`` and ``agent_round``.
* ``event_or_deadline``: wait for a uniquely named event raced with a durable timer, the way
  every wait of the app is bounded (``wait_for_external_event`` has no timeout of its own).
* ``child_version`` / ``kind_version``: versions (docs/versioning.md). A sub-orchestration the
  app starts inherits its parent's version, so one turn's whole tree follows one app
  version's code and contracts, whichever deployment serves it; a task record carries the
  kind version its instance follows.

Nothing here does IO: each step only asks the context for durable actions, so a sub-generator
called with ``yield from`` replays exactly as the same code written inline.
"""

from __future__ import annotations

import json
from collections.abc import Generator
from datetime import datetime
from typing import Any

import azure.durable_functions as df

from kernel.common import ids
from kernel.session import task_types

STATUS_LIMIT = 1000


def session_entity(session_id: str) -> df.EntityId:
    return df.EntityId("session", ids.session_entity_key(session_id))


def set_status(context: df.DurableOrchestrationContext, phase: str, **fields: Any) -> None:
    """Publish ``{"phase", ...}``: never empty, and cut to stay under ``STATUS_LIMIT`` bytes."""
    value = {"phase": phase, **{k: v for k, v in fields.items() if v is not None}}
    if len(json.dumps(value)) > STATUS_LIMIT:
        value = {k: (v[:200] if isinstance(v, str) else v) for k, v in value.items()}
    if len(json.dumps(value)) > STATUS_LIMIT:
        value = {"phase": phase, "round": fields.get("round")}
    context.set_custom_status(value)


def set_phase(context: df.DurableOrchestrationContext, phase: str, **extra: Any) -> None:
    """Publish ``{"phase", **extra}`` as given (callers keep it small)."""
    context.set_custom_status({"phase": phase, **extra})


def event_payload(value: Any) -> dict[str, Any]:
    """An external event's payload as an object (the SDK client sends JSON text, SDK #295)."""
    for _ in range(2):
        if not isinstance(value, str):
            break
        try:
            value = json.loads(value)
        except ValueError:
            break
    return value if isinstance(value, dict) else {"value": value}


def error_text(envelope: dict[str, Any]) -> str:
    error = envelope.get("error") or {}
    return f"{error.get('error', 'error')}: {error.get('message', '')}"[:500]


def event_or_deadline(
    context: df.DurableOrchestrationContext, event: str, deadline: datetime
) -> Generator[Any, Any, tuple[bool, Any]]:
    """(True, payload) when ``event`` is raised before ``deadline``, else (False, None).

    The event is waited for first, then the timer; the timer is cancelled when the event wins.
    """
    raised = context.wait_for_external_event(event)
    timer = context.create_timer(deadline)
    winner = yield context.task_any([raised, timer])
    if winner == raised:
        timer.cancel()
        return True, raised.result
    return False, None


def child_version(context: df.DurableOrchestrationContext) -> str:
    """The version of a sub-orchestration this instance starts: its own (inherited)."""
    return context.version or ""


def kind_version(context: df.DurableOrchestrationContext, kind: str) -> str:
    """The version of ``kind`` this instance follows (``kernel.session.task_types``)."""
    return task_types.task_type(kind).version_for(context.version)


def turn_patch(
    turn_id: str, status: str | None = None, phase: str | None = None, reason: str | None = None
) -> dict[str, Any]:
    """A task patch of the turn task: only the fields given, the reason cut to 1000 chars."""
    patch: dict[str, Any] = {"id": turn_id}
    for key, value in (("status", status), ("phase", phase), ("reason", reason)):
        if value is not None:
            patch[key] = value[:1000] if key == "reason" else value
    return patch
