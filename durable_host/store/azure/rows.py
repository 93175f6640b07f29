"""Rows as the store builds and reads them: inbox messages, work items, history events and
instance records, with large texts in blobs (``HubTables.put_text`` / ``get_text``).

Every row this process writes carries its writer ``W`` (``poll`` tells foreign work by it)
and a fresh id from one ``MessageIds`` per store, so ids increase in arrival order.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from azure.core.exceptions import ResourceNotFoundError

from durable_host.core.records import ActivityWork, InstanceRecord
from durable_host.store.azure.codec import (
    Head,
    MessageIds,
    generation_rows,
    history_row_key,
    inbox_row_key,
    instance_id_of,
    item_id,
    work_row_key,
)
from durable_host.store.azure.errors import StoreConflictError
from durable_host.store.azure.tables import HubTables
from durable_host.store.codec import decode_event

_RECORD_TEXTS = ("Input", "Output", "CustomStatus", "EntityState")


def _blobs(row: dict[str, Any]) -> list[Any]:
    """The payload blobs a head row names for its record's texts."""
    return [row.get(n + "Blob") for n in _RECORD_TEXTS]


class HubRows:
    """Builds rows to write and decodes rows read (see the module docstring)."""

    def __init__(self, tables: HubTables) -> None:
        self._tables = tables
        self._ids = MessageIds()

    def base_row(self, partition: str, row_key: str) -> dict[str, Any]:
        return {"PartitionKey": partition, "RowKey": row_key, "W": self._tables.writer}

    async def inbox_row(
        self, partition: str, message: dict[str, Any], visible_at: str | None = None
    ) -> tuple[int, dict[str, Any]]:
        """A new inbox row (not yet written) and its message id."""
        message_id = self._ids.next()
        row = self.base_row(partition, inbox_row_key(message_id))
        if visible_at is not None:
            row["VisibleAt"] = visible_at
        await self._tables.put_text(row, "M", json.dumps(message))
        return message_id, row

    async def work_row(
        self, partition: str, payload: dict[str, Any]
    ) -> tuple[ActivityWork, dict[str, Any]]:
        """A new work item row (not yet written), already handed to the committing engine."""
        work_id = self._ids.next()
        row = self.base_row(partition, work_row_key(work_id))
        row.update(
            ExecutionId=payload["execution_id"],
            TaskId=int(payload["task_id"]),
            Name=payload["name"],
            DequeueCount=1,  # handed at creation: the committing engine runs it at once
        )
        await self._tables.put_text(row, "Input", payload["input_json"])
        work = ActivityWork(
            work_id,
            payload["instance_id"],
            payload["execution_id"],
            int(payload["task_id"]),
            payload["name"],
            payload["input_json"],
            1,
        )
        return work, row

    async def work_item(self, row: Any) -> ActivityWork:
        """The work item a stored work row describes."""
        return ActivityWork(
            item_id(row["RowKey"]),
            instance_id_of(row["PartitionKey"]),
            row["ExecutionId"],
            int(row["TaskId"]),
            row["Name"],
            await self._tables.get_text(row, "Input"),
            int(row.get("DequeueCount", 0)),
        )

    async def history_row(
        self, partition: str, generation: str, sequence: int, event: dict[str, Any]
    ) -> dict[str, Any]:
        row = {"PartitionKey": partition, "RowKey": history_row_key(generation, sequence)}
        await self._tables.put_text(row, "E", json.dumps(event))
        return row

    async def instance_record(self, partition: str, row: dict[str, Any]) -> InstanceRecord:
        """The instance record a head row holds. A blob the row names may be gone because a
        newer commit replaced the row and dropped the blob (an entity's state): then the
        head is read again. The error stands when there is no head (a purge) or the head
        names the same blobs (the blob is lost, not replaced: reading again cannot help)."""
        for _ in range(5):
            try:
                texts = await asyncio.gather(
                    *(self._tables.get_text(row, n) for n in _RECORD_TEXTS)
                )
                break
            except ResourceNotFoundError:
                head = await self._tables.read_head(partition)
                if head is None or _blobs(head.row) == _blobs(row):
                    raise
                row = head.row
        else:
            raise StoreConflictError(f"instance {instance_id_of(partition)} kept changing")
        return InstanceRecord(
            instance_id=instance_id_of(partition),
            name=str(row.get("Name", "")),
            status=str(row.get("Status", "")),
            execution_id=row.get("ExecutionId") or None,
            version=row.get("Version"),
            input_json=texts[0],
            output_json=texts[1],
            custom_status_json=texts[2],
            created_at=str(row.get("CreatedAt", "")),
            updated_at=str(row.get("UpdatedAt", "")),
            parent_instance_id=row.get("ParentInstanceId") or None,
            entity_state=texts[3],
            entity_exists=bool(row.get("EntityExists", False)),
        )

    async def history_events(self, head: Head, rows: list[Any]) -> list[dict[str, Any]] | None:
        """The head's visible history from ``rows``; None if rows are missing (re-read)."""
        prefix = generation_rows(head.generation)[0]
        visible = sorted(
            (r for r in rows if r["RowKey"].startswith(prefix)), key=lambda r: r["RowKey"]
        )[: head.history_count]
        if len(visible) < head.history_count:
            return None
        texts = await asyncio.gather(*(self._tables.get_text(r, "E") for r in visible))
        instance_id = instance_id_of(head.row["PartitionKey"])
        return [decode_event(instance_id, n, text or "") for n, text in enumerate(texts)]

    async def current_history(self, partition: str, head: Head) -> list[dict[str, Any]]:
        """The head's visible history, for an episode that rewrites it whole."""
        rows = await self._tables.query_rows(partition, *generation_rows(head.generation))
        events = await self.history_events(head, rows)
        if events is None:
            raise StoreConflictError("history rows vanished while the episode ran")
        return events
