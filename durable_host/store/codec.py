"""What every store shares: how stored text becomes messages and events, and what an
episode writes to the instance row. Pure; imports only ``records`` and the port's errors.

* ``decode_message`` never fails: text that is not a message object comes back as
  ``{"kind": "undecodable", "error": ..., "text": <first 200 chars>}``, so the engine can
  quarantine it (the ``fetch_messages`` contract in ``base.py``).
* ``decode_event`` raises ``CorruptHistoryError`` instead (``get_history``).
* ``purgeable`` narrows a bulk purge to terminal instances (the extension's stores never
  purge a running instance by filter).
* An episode writes the instance's output when it ends the execution with one
  (``OUTPUT_STATUSES``) or rewrites the history (a rewind clears the output).
* ``COLUMNS`` and ``instance_record`` / ``instance_values``: the instance row's columns as
  the SQL stores (SQLite, PostgreSQL) select and insert them.
* ``prefix_bound`` turns an instance-id prefix into a key range, so a prefix query reads the
  matching keys only (an index range on SQLite, a PartitionKey range on Azure).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from durable_host.core.records import (
    TERMINAL,
    Episode,
    InstanceRecord,
    MessageKind,
    Query,
    RuntimeStatus,
)
from durable_host.store.base import CorruptHistoryError

OUTPUT_STATUSES: frozenset[str] = frozenset(
    {RuntimeStatus.COMPLETED, RuntimeStatus.FAILED, RuntimeStatus.TERMINATED}
)
UNDECODABLE_TEXT = 200  # characters of an undecodable message kept for the log


def prefix_bound(prefix: str) -> str | None:
    """The least string above every string that starts with ``prefix`` (the prefix with its
    last character incremented), or None when there is no such bound that sorts the same
    way in code points, UTF-8 and UTF-16 (a last character from U+D7FF up, where UTF-16
    puts astral characters below the rest of the plane): then scan, and filter."""
    if not prefix or ord(prefix[-1]) >= 0xD7FF:
        return None
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)


def encode(value: Any) -> str:
    """A message, event or id list as the JSON text a store keeps."""
    return json.dumps(value)


def decode_message(text: str) -> dict[str, Any]:
    """An inbox row as a message; one that cannot be decoded says so (the engine quarantines)."""
    try:
        message = json.loads(text)
    except ValueError as exc:
        return _undecodable(str(exc), text)
    if not isinstance(message, dict) or "kind" not in message:
        return _undecodable("not a message object", text)
    return message


def _undecodable(error: str, text: str) -> dict[str, Any]:
    return {"kind": MessageKind.UNDECODABLE, "error": error, "text": text[:UNDECODABLE_TEXT]}


def decode_event(instance_id: str, position: int | str, text: str) -> dict[str, Any]:
    """A stored history event; ``CorruptHistoryError`` if it is not JSON."""
    try:
        event: dict[str, Any] = json.loads(text)
    except ValueError as exc:
        raise CorruptHistoryError(instance_id, position, str(exc)) from exc
    return event


def writes_output(episode: Episode) -> bool:
    """Whether committing ``episode`` sets the instance's output (to ``output_json``)."""
    return episode.status in OUTPUT_STATUSES or episode.rewrite_history


def parent_instance_id(episode: Episode) -> str | None:
    """The parent of the execution an episode starts (None for a top-level start)."""
    parent: str | None = ((episode.parent or {}).get("OrchestrationInstance") or {}).get(
        "InstanceId"
    )
    return parent


def entity_name(instance_id: str) -> str:
    """``@name@key`` -> ``name`` (the row name of an entity instance)."""
    return instance_id[1:].partition("@")[0]


def purgeable(query: Query) -> Query | None:
    """``query`` limited to terminal statuses; None when it asks for none of them."""
    statuses = sorted(s for s in (query.statuses or TERMINAL) if s in TERMINAL)
    if not statuses:
        return None
    return dataclasses.replace(query, statuses=tuple(statuses), top=None, continuation=None)


COLUMNS = (
    "instance_id, name, status, execution_id, version, input, output, custom_status,"
    " created_at, updated_at, parent_instance_id, entity_state, entity_exists"
)


def instance_record(row: tuple[Any, ...]) -> InstanceRecord:
    return InstanceRecord(
        instance_id=row[0],
        name=row[1],
        status=row[2],
        execution_id=row[3],
        version=row[4],
        input_json=row[5],
        output_json=row[6],
        custom_status_json=row[7],
        created_at=row[8],
        updated_at=row[9],
        parent_instance_id=row[10],
        entity_state=row[11],
        entity_exists=bool(row[12]),
    )


def instance_values(r: InstanceRecord) -> tuple[Any, ...]:
    """The record's values in ``COLUMNS`` order (``entity_exists`` as 0 or 1)."""
    return (
        r.instance_id,
        r.name,
        r.status,
        r.execution_id,
        r.version,
        r.input_json,
        r.output_json,
        r.custom_status_json,
        r.created_at,
        r.updated_at,
        r.parent_instance_id,
        r.entity_state,
        int(r.entity_exists),
    )
