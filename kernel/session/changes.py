"""The session's change log and cursor: what a reader needs to follow a session. Pure.

Contract:
* Every successful mutating operation calls ``record_change`` exactly once: ``cursor`` goes up
  by one and one record ``{cursor, at, op, kinds, items}`` is appended. Records therefore carry
  consecutive cursors; an operation that changes nothing records nothing.
* ``items`` are small summaries (``{"type": "entry", "n": 7, ...}``,
  ``{"type": "task", "id", "status", "phase"}``), never content: a reader fetches entry texts and
  document data from the view, which keeps the log small.
* The log is complete: the head keeps the recent records and older ones are sealed into pages
  (``kernel.session.pages``). ``changes_after(state, c, limit, load)`` returns the records with
  cursor > c, oldest first, at most ``limit`` (default and maximum ``MAX_CHANGES``) in one answer,
  reading sealed pages through ``load``. Following it (the next ``c`` is the last record's cursor)
  yields every record exactly once, for any start in ``0..cursor``.
* Only a session migrated from an older schema lacks records: those before ``changes_from``.
  A reader whose cursor lies before them gets ``CursorExpiredError`` (HTTP 410, field
  ``after``): it re-reads the view, whose ``cursor`` is a valid point to continue from, instead of
  silently missing changes. A cursor above the current one or below 0 is a ``ValidationError``.
"""

from __future__ import annotations

from typing import Any

from kernel.common.errors import CursorExpiredError, ValidationError
from kernel.session.pages import Loader, records_after
from kernel.session.state import State

MAX_CHANGES = 1_000


def record_change(state: State, *, op: str, at: str, items: list[dict[str, Any]]) -> int:
    """Bump ``state["cursor"]`` and log ``items`` under it; ``state`` is a working copy."""
    cursor = state["cursor"] + 1
    state["cursor"] = cursor
    kinds = list(dict.fromkeys(item["type"] for item in items))
    state["changes"].append({"cursor": cursor, "at": at, "op": op, "kinds": kinds, "items": items})
    return cursor


def changes_after(
    state: State, after: object, limit: int | None = None, load: Loader | None = None
) -> list[dict[str, Any]]:
    """Records with cursor > ``after``, oldest first, at most ``limit`` of them (copies)."""
    current = state["cursor"]
    if not isinstance(after, int) or isinstance(after, bool) or not 0 <= after <= current:
        raise ValidationError(
            "invalid_cursor", f"after must be an integer in 0..{current}", "after"
        )
    if limit is not None and limit < 1:
        raise ValidationError("invalid_limit", "limit must be at least 1", "limit")
    first = state.get("changes_from", 1)
    if after < first - 1:
        raise CursorExpiredError(
            "cursor_expired",
            f"changes up to {first - 1} are no longer kept: re-read the view and continue "
            "from its cursor",
            "after",
        )
    return records_after(state, "changes", after, min(limit or MAX_CHANGES, MAX_CHANGES), load)
