"""The session core: every operation of the ``session`` entity as a pure reducer.

The entity holds one JSON state per session id and, for each operation, calls::

    new_state, result = apply(old_state, op, request, now)   # or a KernelError is raised

then sets its state once from ``new_state`` (when ``new_state is not old_state``) and returns
``result``. The Durable SDK keeps partially mutated state when an operation raises, so nothing
here mutates its input: writes go to a working copy that is dropped on failure.

Operations (request shapes in ``kernel.session.requests``; full contract in docs/kernel-session.md):

=============== ===================================================== ===================
``accept``      a user submission, first-wins by ``request_id``        ``submissions``
``commit``      entries + documents + tasks + submission, atomically  ``commit``
``finish``      a submission ends; the next queued one becomes active ``submissions``
``cancel``      cancel a queued submission / request it of an active  ``submissions``
``view``        the session head: recent entries, counts, pages (read) here
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

After a mutating operation the entity calls ``seal(new_state, page_size)`` (``kernel.session.pages``):
it returns the head with old records moved out and the page texts to store first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kernel.common.errors import ValidationError
from kernel.session import pages
from kernel.session.changes import MAX_CHANGES
from kernel.session.changes import changes_after as _changes_after
from kernel.session.commit import commit
from kernel.session.entries import last_entry_number
from kernel.session.pages import DEFAULT_PAGE_SIZE, Loader, seal
from kernel.session.requests import ChangesRequest, SubmissionRequest, parse
from kernel.session.state import SCHEMA_VERSION, State, new_state, upgrade, working_copy
from kernel.session.submissions import accept, cancel, find_submission, finish, position

__all__ = [
    "DEFAULT_PAGE_SIZE",
    "MAX_CHANGES",
    "SCHEMA_VERSION",
    "accept",
    "apply",
    "cancel",
    "changes_after",
    "commit",
    "entries_after",
    "finish",
    "is_idle",
    "new_state",
    "seal",
    "sealed_submission_view",
    "submission_view",
    "upgrade",
    "view",
    "view_counts",
]

_VIEW_KEYS = (
    "session_id", "created_at", "cursor", "conversations", "entries", "documents",
    "document_history", "tasks", "submissions", "turn_queue", "active_submission",
    "changes_from",
)  # fmt: skip
MAX_ENTRIES_PAGE = 1_000

Reducer = Callable[[State, object, str], tuple[State, Any]]


def view(state: State) -> dict[str, Any]:
    """The head without its change log, as a copy; its ``cursor`` is where to follow changes.

    ``entries``, ``document_history``, ``submissions`` and ``tasks`` hold what is recent (or
    still open); ``counts`` says how much there is in all and ``pages`` how much is sealed.
    """
    current = upgrade(state)
    out = working_copy({key: current[key] for key in _VIEW_KEYS})
    out["counts"] = view_counts(current)
    return out


def view_counts(state: State) -> dict[str, Any]:
    """Totals over the head and its sealed pages: entries, submissions, live documents, and
    how many records of each log are sealed."""
    current = upgrade(state)
    directory = current["pages"]
    sealed = {log: sum(p["count"] for p in directory[log]) for log in directory}
    return {
        "entries": last_entry_number(current),
        "submissions": len(current["submissions"]) + sealed["submissions"],
        "documents": current["counts"]["documents"],
        "sealed": sealed,
    }


def sealed_submission_view(
    state: State | None, submission_id: str, load: Loader
) -> dict[str, Any] | None:
    """A submission sealed out of the head (always final: ``position`` null), or None."""
    if state is None:
        return None
    current = upgrade(state)
    if not current["pages"]["submissions"]:
        return None
    record = pages.sealed_submission(current, submission_id, load)
    return None if record is None else {**record["submission"], "position": None}


def changes_after(
    state: State, after: object, limit: int | None = None, load: Loader | None = None
) -> list[dict[str, Any]]:
    """Change records with cursor > ``after`` across sealed pages (see ``kernel.session.changes``)."""
    return _changes_after(upgrade(state), after, limit, load)


def entries_after(
    state: State, after: object, limit: int | None = None, load: Loader | None = None
) -> list[dict[str, Any]]:
    """Entries with ``n`` > ``after``, oldest first, at most ``limit`` (1..1,000; default
    1,000), reading sealed pages through ``load``."""
    current = upgrade(state)
    last = last_entry_number(current)
    if not isinstance(after, int) or isinstance(after, bool) or not 0 <= after <= last:
        raise ValidationError("invalid_cursor", f"after must be an integer in 0..{last}", "after")
    if limit is not None and not 1 <= limit <= MAX_ENTRIES_PAGE:
        raise ValidationError(
            "invalid_limit", f"limit must be an integer in 1..{MAX_ENTRIES_PAGE}", "limit"
        )
    return pages.records_after(current, "entries", after, limit or MAX_ENTRIES_PAGE, load)


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
    return current, changes_after(current, req.after, req.limit)  # the head's tail only


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
