"""The session state document: creation, schema versions, upgrade, working copies. Pure.

The state is one plain JSON object per session (shape in ``docs/kernel-session.md``), stored
by the ``session`` entity. Every field is JSON, so the entity can persist it as is.

Schema versions:
* v1: the first shape, without the ``changes`` log.
* v2: adds ``changes``. A migrated state starts with an empty log, so a reader holding a cursor
  older than the migration gets ``CursorExpiredError`` and re-reads the view: the log cannot be
  reconstructed, and pretending it is complete would hide changes.
* v3: the state is a head; old entries, change records, document history
  and settled submissions move into sealed pages (``kernel.session.pages``) listed in ``pages``.
  ``changes_from`` is the first cursor the log still holds (1 for a session born in v3; for a
  migrated one, its oldest kept record), ``counts`` keeps totals the head no longer shows.
  The migration itself moves nothing: the entity seals the excess with its next write.
* v4 (``SCHEMA_VERSION``): adds ``owner``, the principal the first submission came from (None:
  nobody's, open to every caller the API lets in). A migrated session has no owner: who
  created it was never recorded, and guessing would lock its real users out.

Contract:
* ``upgrade(state)`` returns ``state`` itself when it is current, else an upgraded copy; it
  never mutates its argument. A state newer than this code raises ``ConflictError`` so an old
  worker in a rolling deploy cannot rewrite a shape it does not understand.
* ``working_copy(state)`` is a deep copy that reducers mutate; the input stays untouched, so
  an operation that raises halfway has changed nothing.
* ``decode_entity_state(read)`` is the state in what a durable client's ``read_entity_state``
  answered (JSON text or an object, depending on the SDK path), or None when there is none.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, Protocol

from kernel.common import ids
from kernel.common.errors import ConflictError, ValidationError
from kernel.session.pages import empty_directory

State = dict[str, Any]

SCHEMA_VERSION = 4
MAIN_CONVERSATION = "main"


def new_state(session_id: str, now: str) -> State:
    at = validate_timestamp(now)
    return {
        "schema_version": SCHEMA_VERSION,
        "session_id": ids.validate_session_id(session_id),
        "created_at": at,
        "cursor": 0,
        "conversations": {MAIN_CONVERSATION: {"id": MAIN_CONVERSATION, "created_at": at}},
        "entries": [],
        "documents": {},
        "document_history": [],
        "tasks": {},
        "submissions": {},
        "turn_queue": [],
        "active_submission": None,
        "changes": [],
        "changes_from": 1,
        "pages": empty_directory(),
        "document_buckets": {},
        "counts": {"sealed_submissions": 0, "documents": 0},
        "owner": None,
    }


def upgrade(state: State) -> State:
    version = state.get("schema_version")
    if version == SCHEMA_VERSION:
        return state
    if not isinstance(version, int) or not 1 <= version < SCHEMA_VERSION:
        raise ConflictError(
            "unsupported_schema_version",
            f"state has schema version {version!r}; this code reads 1..{SCHEMA_VERSION}",
        )
    upgraded = working_copy(state)
    while upgraded["schema_version"] < SCHEMA_VERSION:
        upgraded = _MIGRATIONS[upgraded["schema_version"]](upgraded)
    return upgraded


def _v1_to_v2(state: State) -> State:
    state["changes"] = []
    state["schema_version"] = 2
    return state


def _v2_to_v3(state: State) -> State:
    changes = state["changes"]
    state["changes_from"] = changes[0]["cursor"] if changes else state["cursor"] + 1
    state["pages"] = empty_directory()
    state["document_buckets"] = {}
    live = sum(1 for doc in state["documents"].values() if not doc.get("deleted"))
    state["counts"] = {"sealed_submissions": 0, "documents": live}
    state["schema_version"] = 3
    return state


def _v3_to_v4(state: State) -> State:
    state["owner"] = None
    state["schema_version"] = 4
    return state


_MIGRATIONS: dict[int, Callable[[State], State]] = {1: _v1_to_v2, 2: _v2_to_v3, 3: _v3_to_v4}


def working_copy(state: State) -> State:
    # A JSON round trip is several times faster than copy.deepcopy on plain data, and it
    # proves the state is still JSON.
    return json.loads(json.dumps(state))


def validate_timestamp(value: object, field: str = "now") -> str:
    """Accept an ISO-8601 UTC timestamp (``Z`` or ``+00:00``) and return it unchanged."""
    if isinstance(value, str):
        try:
            if datetime.fromisoformat(value).utcoffset() == timedelta(0):
                return value
        except ValueError:
            pass
    raise ValidationError("invalid_timestamp", "must be an ISO-8601 timestamp in UTC", field)


class EntityRead(Protocol):
    """What ``DurableOrchestrationClient.read_entity_state`` answers."""

    entity_exists: bool
    entity_state: Any


def decode_entity_state(read: EntityRead) -> State | None:
    """The stored session state, or None when the entity holds none."""
    if not read.entity_exists or read.entity_state is None:
        return None
    raw = read.entity_state
    parsed = json.loads(raw) if isinstance(raw, str) else raw
    return parsed if isinstance(parsed, dict) else None
