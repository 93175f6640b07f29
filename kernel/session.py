"""The session core: every operation of the ``session`` entity as a pure reducer.

The entity holds one JSON state per session id and, for each operation, calls::

    new_state, result = apply(old_state, op, request, now)   # or a KernelError is raised

then sets its state once from ``new_state`` (when ``new_state is not old_state``) and returns
``result``. The Durable SDK keeps partially mutated state when an operation raises, so nothing
here mutates its input: writes go to a working copy that is dropped on failure.

Operations (request shapes in ``kernel.requests``; full contract in docs/kernel-session.md):

=============== ===================================================== ===================
``accept``      a user submission, first-wins by ``request_id``        ``submissions``
``commit``      entries + documents + tasks + submission, atomically  ``commit``
``finish``      a submission ends; the next queued one becomes active ``submissions``
``cancel``      cancel a queued submission / request it of an active  ``submissions``
``view``        the full session view (read)                          here
``changes_after`` change records after ``{after, limit?}`` (read)     ``changes``
``submission_view`` one submission and its queue position (read)      here
``is_idle``     no active and no queued submission (read)             here
=============== ===================================================== ===================

Invariants (each pinned by tests/unit/kernel):
* A raised operation leaves the input ``json.dumps``-identical.
* An operation that changes nothing (a duplicate ``accept``, a repeated ``finish`` or
  ``cancel``, any read) returns the input object itself, so ``new is old`` means "do not write".
  The exception is a state of an older schema version: it comes back upgraded, and the entity
  writes it, which persists the migration.
* Every other successful operation bumps ``cursor`` by exactly one and logs one change record.
* ``now`` is an ISO-8601 UTC string chosen by the caller; the core reads no clock.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kernel.changes import MAX_CHANGES, changes_after
from kernel.commit import commit
from kernel.errors import ValidationError
from kernel.requests import ChangesRequest, SubmissionRequest, parse
from kernel.state import SCHEMA_VERSION, State, new_state, upgrade, working_copy
from kernel.submissions import accept, cancel, find_submission, finish, position

__all__ = [
    "MAX_CHANGES",
    "SCHEMA_VERSION",
    "accept",
    "apply",
    "cancel",
    "changes_after",
    "commit",
    "finish",
    "is_idle",
    "new_state",
    "submission_view",
    "upgrade",
    "view",
]

_VIEW_KEYS = (
    "session_id", "created_at", "cursor", "conversations", "entries", "documents",
    "document_history", "tasks", "submissions", "turn_queue", "active_submission",
)  # fmt: skip

Reducer = Callable[[State, object, str], tuple[State, Any]]


def view(state: State) -> dict[str, Any]:
    """Everything but the change log, as a copy; its ``cursor`` is where to follow changes."""
    current = upgrade(state)
    return working_copy({key: current[key] for key in _VIEW_KEYS})


def submission_view(state: State, submission_id: str) -> dict[str, Any]:
    current = upgrade(state)
    sub = working_copy(find_submission(current, submission_id))
    sub["position"] = position(current, submission_id)
    return sub


def is_idle(state: State) -> bool:
    """True when no submission is active or queued (task records are mirrors, not work)."""
    current = upgrade(state)
    return current["active_submission"] is None and not current["turn_queue"]


def _read_changes(state: State, request: object, now: str) -> tuple[State, Any]:
    req = parse(ChangesRequest, request)
    current = upgrade(state)
    return current, changes_after(current, req.after, req.limit)


def _read_submission(state: State, request: object, now: str) -> tuple[State, Any]:
    req = parse(SubmissionRequest, request)
    return upgrade(state), submission_view(state, req.submission_id)


def _read_view(state: State, request: object, now: str) -> tuple[State, Any]:
    return upgrade(state), view(state)


def _read_idle(state: State, request: object, now: str) -> tuple[State, Any]:
    return upgrade(state), is_idle(state)


OPERATIONS: dict[str, Reducer] = {
    "accept": accept,
    "commit": commit,
    "finish": finish,
    "cancel": cancel,
    "view": _read_view,
    "changes_after": _read_changes,
    "submission_view": _read_submission,
    "is_idle": _read_idle,
}


def apply(state: State, op: str, request: object, now: str) -> tuple[State, Any]:
    """Run operation ``op``; return ``(new_state, result)`` or raise a ``KernelError``."""
    reducer = OPERATIONS.get(op)
    if reducer is None:
        known = ", ".join(OPERATIONS)
        raise ValidationError("unknown_operation", f"known operations: {known}", "operation")
    return reducer(state, {} if request is None else request, now)
