"""Instance queries and purges (discovery of work is ``discovery.py``'s, through the index).

An instance query reads head rows only: the table applies the time ranges, statuses, the
entity / orchestration split and the prefix as a PartitionKey range; the conditions on the
instance id (prefix, continuation) are checked again here, on the unescaped id.

A bulk purge removes terminal instances only (``codec.purgeable``), and checks the status
again on the head it deletes If-Match, so an instance restarted meanwhile is kept.
A purge first finishes the instance's last commit (so a parent waiting for its completion
still receives it), then deletes the head If-Match - the point of no return - then every
other row and the payload blobs.
"""

from __future__ import annotations

import asyncio
from typing import Any

from durable_host.core.records import TERMINAL, InstanceRecord, Query, QueryPage
from durable_host.ops import faults
from durable_host.store import codec as store_codec
from durable_host.store.azure.attempts import EpisodeAttempts
from durable_host.store.azure.codec import (
    HEAD_ROW,
    instance_id_of,
    partition_key,
    payload_blob_dir,
)
from durable_host.store.azure.commit import CommitProtocol
from durable_host.store.azure.errors import StoreConflictError
from durable_host.store.azure.index import HubIndex
from durable_host.store.azure.rows import HubRows
from durable_host.store.azure.tables import HubTables
from durable_host.store.azure.work import WorkItems


class HubScans:
    """The store's cross-partition operations (see the module docstring)."""

    def __init__(
        self,
        tables: HubTables,
        rows: HubRows,
        commits: CommitProtocol,
        work: WorkItems,
        attempts: EpisodeAttempts,
        index: HubIndex,
    ) -> None:
        self._tables = tables
        self._rows = rows
        self._commits = commits
        self._work = work
        self._attempts = attempts
        self._index = index

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
        self._index.forget(partition)  # its hints are now stale: surveys drop them
        return count


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
    if query.prefix:
        # Escaping maps character by character, so the ids with the prefix have the keys that
        # start with its escaped form: a key range (``_wanted`` still checks the id itself).
        start = partition_key(query.prefix)
        where.append("PartitionKey ge @pf")
        params["pf"] = start
        if (bound := store_codec.prefix_bound(start)) is not None:
            where.append("PartitionKey lt @pt")
            params["pt"] = bound
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
