"""Scans across partitions: ready instances, the next due timer, polling for foreign work,
instance queries and purges.

Scans filter on the server and skip staged rows that are not visible yet
(``CommitProtocol.is_visible``). An instance query reads head rows only: the table applies
the time ranges, statuses and the entity / orchestration split; the conditions on the
instance id (prefix, continuation) are applied here, on the unescaped id.

``poll`` finds work this process was not told about: inbox rows written by another
process, own inbox rows left unprocessed for ``STALE_SECONDS`` (a dispatch was lost, e.g.
a commit reported as failed that had applied), and work items never handed to this
engine. It waits ``POLL_MIN`` before each scan, doubling up to ``POLL_MAX`` while nothing
foreign turns up.

A bulk purge removes terminal instances only (``codec.purgeable``), and checks the status
again on the head it deletes If-Match, so an instance restarted meanwhile is kept.
A purge first finishes the instance's last commit (so a parent waiting for its completion
still receives it), then deletes the head If-Match - the point of no return - then every
other row and the payload blobs.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import UTC, datetime
from typing import Any

from azure.core.exceptions import AzureError

from durable_host import faults
from durable_host import history as h
from durable_host.records import TERMINAL, ActivityWork, InstanceRecord, Query, QueryPage
from durable_host.store import codec as store_codec
from durable_host.store.azure.attempts import EpisodeAttempts
from durable_host.store.azure.codec import (
    HEAD_ROW,
    INBOX_ROWS,
    Head,
    instance_id_of,
    item_id,
    partition_key,
    payload_blob_dir,
    written_at,
)
from durable_host.store.azure.commit import CommitProtocol
from durable_host.store.azure.errors import AzureStoreError, StoreConflictError
from durable_host.store.azure.rows import HubRows
from durable_host.store.azure.tables import HubTables
from durable_host.store.azure.work import WorkItems

log = logging.getLogger("durable_host.store.azure")

POLL_MIN, POLL_MAX = 0.2, 10.0
STALE_SECONDS = 30.0  # own inbox rows older than this are re-announced by ``poll``


class HubScans:
    """The store's cross-partition operations (see the module docstring)."""

    def __init__(
        self,
        tables: HubTables,
        rows: HubRows,
        commits: CommitProtocol,
        work: WorkItems,
        attempts: EpisodeAttempts,
    ) -> None:
        self._tables = tables
        self._rows = rows
        self._commits = commits
        self._work = work
        self._attempts = attempts
        self._poll_delay = POLL_MIN

    # --- readiness and timers ----------------------------------------------------------

    async def ready_instances(self, now: str, due_only: bool) -> list[str]:
        """Instances with visible messages (``due_only``: only those with due timers)."""
        flt = "RowKey ge @lo and RowKey lt @hi"
        if due_only:
            flt += " and VisibleAt le @now"
        rows = await self._tables.query(
            flt,
            {**_inbox_range(), "now": now},
            select=["PartitionKey", "RowKey", "VisibleAt", "Tok", "Src", "SrcSeq"],
        )
        heads: dict[str, Head | None] = {}
        oldest: dict[str, str] = {}  # partition -> row key of its oldest visible message
        for row in rows:
            if row["PartitionKey"] in oldest or (row.get("VisibleAt") or "") > now:
                continue
            if await self._commits.is_visible(row, heads):
                oldest[row["PartitionKey"]] = row["RowKey"]  # rows come in row key order
        # Arrival order (inbox ids grow with time): work accepted first resumes first.
        return [instance_id_of(p) for p in sorted(oldest, key=lambda p: (oldest[p], p))]

    async def next_due(self, now: str) -> str | None:
        rows = await self._tables.query(
            "RowKey ge @lo and RowKey lt @hi and VisibleAt gt @now",
            {**_inbox_range(), "now": now},
            select=["VisibleAt"],
        )
        return min((r["VisibleAt"] for r in rows), default=None)

    async def poll(self) -> tuple[list[str], list[ActivityWork]]:
        """Wait, then report work this process was not told about; never raises."""
        await asyncio.sleep(self._poll_delay)
        try:
            instance_ids, foreign = await self._poll_inbox()
            works = await self._work.not_handed()
        except (AzureError, AzureStoreError) as exc:
            log.debug("poll failed: %s", exc)
            self._poll_delay = min(self._poll_delay * 2, POLL_MAX)
            return [], []
        busy = foreign or bool(works)
        self._poll_delay = POLL_MIN if busy else min(self._poll_delay * 2, POLL_MAX)
        return instance_ids, works

    async def _poll_inbox(self) -> tuple[list[str], bool]:
        """Instances with visible messages that are foreign or stale, and whether any
        message was foreign."""
        rows = await self._tables.query(
            "RowKey ge @lo and RowKey lt @hi",
            _inbox_range(),
            select=["PartitionKey", "RowKey", "VisibleAt", "W"],
        )
        now_text, now = h.format_time(datetime.now(UTC)), time.time()
        ready: set[str] = set()
        foreign = False
        for row in rows:
            visible_at = row.get("VisibleAt") or ""
            if visible_at > now_text:
                continue
            written = written_at(item_id(row["RowKey"]))
            due = h.parse_time(visible_at).timestamp() if visible_at else written
            if row.get("W") != self._tables.writer:
                foreign = True
                ready.add(row["PartitionKey"])
            elif now - max(written, due) > STALE_SECONDS:
                ready.add(row["PartitionKey"])
        return sorted(instance_id_of(p) for p in ready), foreign

    # --- queries -----------------------------------------------------------------------

    async def query(self, query: Query) -> QueryPage:
        records = await self._matching(query)
        limit = query.top if query.top and query.top > 0 else None
        if limit is not None:
            records = records[:limit]
        token = records[-1].instance_id if limit and len(records) == limit else None
        return QueryPage(records, token)

    async def _matching(self, query: Query) -> list[InstanceRecord]:
        flt, params = _server_filter(query)
        heads = await self._tables.query(flt, params)
        keep = [r for r in heads if _wanted(instance_id_of(r["PartitionKey"]), query)]
        keep.sort(key=lambda r: instance_id_of(r["PartitionKey"]))
        return list(
            await asyncio.gather(
                *(self._rows.instance_record(r["PartitionKey"], dict(r)) for r in keep)
            )
        )

    # --- purge -------------------------------------------------------------------------

    async def purge(self, instance_id: str) -> int:
        return await self._purge_partition(partition_key(instance_id))

    async def purge_many(self, query: Query) -> int:
        terminal = store_codec.purgeable(query)
        if terminal is None:
            return 0
        records = await self._matching(terminal)
        counts = [
            await self._purge_partition(partition_key(r.instance_id), terminal_only=True)
            for r in records
        ]
        return sum(counts)

    async def _purge_partition(self, partition: str, terminal_only: bool = False) -> int:
        count = 0
        for _ in range(5):
            head = await self._tables.read_head(partition)
            self._tables.check_epoch(head)
            await self._commits.settle(partition, head)  # deliver what its last commit sent
            if head is None:
                break
            if terminal_only and head.row.get("Status") not in TERMINAL:
                return 0
            faults.hit("store.before_commit")
            if await self._tables.delete_row(partition, HEAD_ROW, head.etag):
                count = 1
                break
        else:
            raise StoreConflictError(
                f"instance {instance_id_of(partition)} kept changing while it was purged"
            )
        rows = await self._tables.query("PartitionKey eq @pk", {"pk": partition}, select=["RowKey"])
        await self._tables.delete_rows(
            partition, [r["RowKey"] for r in rows if r["RowKey"] != HEAD_ROW]
        )
        await self._tables.delete_blobs(payload_blob_dir(partition) + "/")
        self._work.forget(partition)
        self._commits.forget(partition)
        self._attempts.forget(partition)
        return count


def _inbox_range() -> dict[str, str]:
    low, high = INBOX_ROWS
    return {"lo": low, "hi": high}


def _query_fields(query: Query) -> dict[str, Any]:
    return {name: getattr(query, name) for name in Query.__dataclass_fields__}


def _server_filter(query: Query) -> tuple[str, dict[str, Any]]:
    """Server-side part of a query: head rows plus the range filters the table can apply."""
    where, params = ["RowKey eq @head"], {"head": HEAD_ROW}
    for column, op, name, value in (
        ("CreatedAt", "ge", "cf", query.created_from),
        ("CreatedAt", "le", "ct", query.created_to),
        ("UpdatedAt", "ge", "uf", query.updated_from),
        ("UpdatedAt", "le", "ut", query.updated_to),
    ):
        if value is not None:
            where.append(f"{column} {op} @{name}")
            params[name] = value
    if query.statuses:
        alternatives = []
        for n, status in enumerate(query.statuses):
            alternatives.append(f"Status eq @s{n}")
            params[f"s{n}"] = status
        where.append("( " + " or ".join(alternatives) + " )")
    # Entity ids are ``@name@key``: their escaped partition keys sort in ['@', 'A').
    if query.entities is True:
        where.append("PartitionKey ge '@' and PartitionKey lt 'A'")
    elif query.entities is False:
        where.append("(PartitionKey lt '@' or PartitionKey ge 'A')")
    return " and ".join(where), params


def _wanted(instance_id: str, query: Query) -> bool:
    """Client-side part of a query: conditions on the (unescaped) instance id."""
    if query.continuation is not None and not instance_id > query.continuation:
        return False
    return not query.prefix or instance_id.startswith(query.prefix)
