"""What a store offers a transfer, in domain terms: a hub read whole, or written whole.

A hub is its instances (each with its status row, the current execution's history, its inbox
of messages and timers, and its attempt count), its activity work items, its timer-trigger
schedule status and its host secrets. Messages and events travel as the JSON texts a store
keeps (``store/codec.encode``), byte for byte, so nothing is re-encoded on the way and a
message a store could not decode travels as it is. Sub-orchestration links (the child's
``parent_instance_id`` and its ``ExecutionStarted.ParentInstance``), entity state and locks
(the entity's row and the operations in its inbox) and versions are all in these records.

``HubSource`` (export) reads a hub that no host serves: ``open_quiet`` takes the hub the way
a host takes it (the SQLite file lock, the Azure partition leases, the PostgreSQL lease
rows), so a running host makes it fail.
``HubTarget`` (import) writes into an empty hub, all of it or nothing: ``write`` takes the
records as a stream and either commits every one or leaves the hub as empty as it was.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from durable_host.core.records import InstanceRecord


@dataclass(slots=True)
class InboxItem:
    message: str  # the message's JSON text, as stored
    visible_at: str | None = None  # a durable timer: invisible until then


@dataclass(slots=True)
class InstanceDump:
    record: InstanceRecord
    history: list[str] = field(default_factory=list)  # each event's JSON text, in order
    inbox: list[InboxItem] = field(default_factory=list)  # in arrival order
    attempts: int = 0


@dataclass(frozen=True, slots=True)
class ActivityDump:
    instance_id: str
    execution_id: str
    task_id: int
    name: str
    input_json: str | None
    dequeue_count: int = 0


@dataclass(frozen=True, slots=True)
class NamedText:
    """A timer-trigger schedule status or a host secret: a name and its stored text."""

    kind: str  # "schedule" or "secret"
    name: str
    value: str


Item = InstanceDump | ActivityDump | NamedText


class HubNotEmptyError(Exception):
    """Import goes into an empty hub only."""


class HubBusyError(Exception):
    """Export needs a quiet hub: a host serves this one."""


class HubSource(Protocol):
    async def read(self, *, include_keys: bool) -> AsyncIterator[Item]:
        """Every record of the hub; host secrets only with ``include_keys``."""
        yield  # type: ignore[misc]

    async def close(self) -> None: ...


class HubTarget(Protocol):
    async def check_empty(self) -> None:
        """Raise ``HubNotEmptyError`` naming what the hub holds, unless it holds nothing."""
        ...

    async def write(self, items: Iterable[Item] | AsyncIterator[Item]) -> int:
        """Write every item, all or nothing; the number of instances written."""
        ...

    async def close(self) -> None: ...


def record_to_json(record: InstanceRecord) -> dict[str, Any]:
    return {
        "instance_id": record.instance_id,
        "name": record.name,
        "status": record.status,
        "execution_id": record.execution_id,
        "version": record.version,
        "input": record.input_json,
        "output": record.output_json,
        "custom_status": record.custom_status_json,
        "created_at": record.created_at,
        "updated_at": record.updated_at,
        "parent_instance_id": record.parent_instance_id,
        "entity_state": record.entity_state,
        "entity_exists": record.entity_exists,
    }


def record_from_json(data: dict[str, Any]) -> InstanceRecord:
    return InstanceRecord(
        instance_id=str(data["instance_id"]),
        name=str(data["name"]),
        status=str(data["status"]),
        execution_id=data.get("execution_id"),
        version=data.get("version"),
        input_json=data.get("input"),
        output_json=data.get("output"),
        custom_status_json=data.get("custom_status"),
        created_at=str(data.get("created_at") or ""),
        updated_at=str(data.get("updated_at") or ""),
        parent_instance_id=data.get("parent_instance_id"),
        entity_state=data.get("entity_state"),
        entity_exists=bool(data.get("entity_exists")),
    )
