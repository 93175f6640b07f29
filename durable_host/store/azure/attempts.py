"""Attempts at an instance's next episode, counted durably for poison detection.

The ``a`` row of a partition counts how often an episode (or entity batch) of the instance
began since its last commit; every commit transaction resets it (``reset_attempts``: to 0,
or to 1 when it counts the next episode in advance), and a purge forgets it. ``begin`` is one conditional write (create, or REPLACE If-Match on
the row as the preceding fetch read it) carrying a nonce, so a retry after a lost
response finds its own count instead of counting twice.
"""

from __future__ import annotations

import functools
import uuid
from typing import Any

from azure.core import MatchConditions
from azure.core.exceptions import HttpResponseError, ResourceExistsError, ResourceNotFoundError
from azure.data.tables import UpdateMode

from durable_host.ops import faults
from durable_host.store.azure.codec import ATTEMPTS_ROW, partition_key
from durable_host.store.azure.errors import StoreConflictError, status_of
from durable_host.store.azure.tables import HubTables, Operation


def reset_attempts(partition: str, count: int = 0) -> Operation:
    """Part of every commit transaction: the episode finished, attempts start over - at 1
    when the commit counts the instance's next episode in advance (``count_next``)."""
    return (
        "upsert",
        {"PartitionKey": partition, "RowKey": ATTEMPTS_ROW, "Count": count},
        {"mode": UpdateMode.REPLACE},
    )


class EpisodeAttempts:
    """``begin_attempt`` of the store, and the attempts rows its fetches read."""

    def __init__(self, tables: HubTables) -> None:
        self._tables = tables
        self._read_by_fetch: dict[str, Any] = {}  # partition -> attempts row (None: absent)

    def remember(self, partition: str, row: Any) -> None:
        """The attempts row as a fetch read it: ``begin`` writes on top of it, saving a read."""
        self._read_by_fetch[partition] = row

    def forget(self, partition: str) -> None:
        self._read_by_fetch.pop(partition, None)

    async def begin(self, instance_id: str) -> int:
        """Count one more attempt at the instance's next episode; committing resets it."""
        partition = partition_key(instance_id)
        row = self._read_by_fetch.pop(partition, None)
        faults.hit("store.before_commit")
        return await self._change(instance_id, row, +1)

    async def release(self, instance_id: str) -> None:
        """Undo one count: an attempt counted in advance that never began (a stop)."""
        partition = partition_key(instance_id)
        self._read_by_fetch.pop(partition, None)
        row = await self._tables.read_row(partition, ATTEMPTS_ROW)
        if row is not None and int(row.get("Count", 0)) > 0:
            await self._change(instance_id, row, -1)

    async def _change(self, instance_id: str, row: Any, step: int) -> int:
        partition = partition_key(instance_id)
        for _ in range(10):
            nonce = uuid.uuid4().hex
            count = await self._tables.retry(
                "count an attempt",
                functools.partial(self._count_once, partition, row, nonce, step),
                write=True,
                fence=partition,
            )
            if count is not None:
                return count
            row = await self._tables.read_row(partition, ATTEMPTS_ROW)
        raise StoreConflictError(f"the attempt count of {instance_id} kept changing")

    async def _count_once(self, partition: str, row: Any, nonce: str, step: int) -> int | None:
        """The new count; None if the row changed since it was read (read it again)."""
        count = max((int(row.get("Count", 0)) if row is not None else 0) + step, 0)
        new = {"PartitionKey": partition, "RowKey": ATTEMPTS_ROW, "Count": count, "N": nonce}
        table = self._tables.table
        try:
            if row is None:
                await table.create_entity(new)
            else:
                await table.update_entity(
                    new,
                    mode=UpdateMode.REPLACE,
                    etag=row.metadata["etag"],
                    match_condition=MatchConditions.IfNotModified,
                )
        except (ResourceExistsError, ResourceNotFoundError):
            return await self._applied_count(partition, nonce)
        except HttpResponseError as exc:
            if status_of(exc) != 412:
                raise
            return await self._applied_count(partition, nonce)
        return count

    async def _applied_count(self, partition: str, nonce: str) -> int | None:
        """The count our own write left, if a lost response hid that it applied."""
        try:
            found = await self._tables.table.get_entity(partition, ATTEMPTS_ROW)
        except ResourceNotFoundError:
            return None
        return int(found["Count"]) if found.get("N") == nonce else None
