"""The transfer protocol on Azure Storage: a hub table and its container read or written whole.

Both sides take **every partition's lease** of the hub (``HubPartitions``, as a host takes
its share), waiting a few seconds at most: a host that serves the hub keeps renewing the
partitions it holds, so the transfer refuses (``HubBusyError``) instead of waiting. Holding
all of them fences every host off the hub while the transfer runs; they are renewed in the
background for as long as it takes.

Export reads one partition (one instance) at a time, in PartitionKey order, through the
store's own readers: each partition's last commit is settled first (``CommitProtocol.settle``:
staged rows released, consumed messages deleted), then the head row's record, the visible
history generation, the inbox rows the store would deliver (above the floor, not consumed,
visible: ``is_visible``) with their ``VisibleAt``, the attempts row and the work items. Host
secrets and schedule status are blobs under ``secrets/`` and ``schedules/``.

Import writes rows in the shapes the store writes them (``codec``: the head ``!`` with
``Gen``/``Count``/``Floor``/``Epoch``, ``h<gen>.<n>`` history rows, ``i<id>`` inbox rows,
``w<id>`` work rows, the ``a`` attempts row; large texts in blobs), one entity-group
transaction per partition, and then removes the index's ``built`` mark, so the first host
that opens the hub builds the index from the rows (``HubIndex.build``): every inbox message
and work item gets its hint, timers included. Azure Storage has no transaction across
partitions, so "all or nothing" is kept this way: the file is verified before anything is
written, the hub is checked empty under the leases, and if a write fails the partitions
already written are deleted again before the error is reported. Only a crash of the import
process itself can leave a partial hub; a second import then refuses it as not empty, and
the hub must be cleared (its table, index table and container deleted) before trying again.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterable
from typing import Any

from azure.data.tables import UpdateMode

from durable_host.store.azure.codec import (
    ATTEMPTS_ROW,
    BATCH_BYTES,
    BATCH_OPS,
    HEAD_ROW,
    INBOX_ROWS,
    WORK_ROWS,
    Head,
    MessageIds,
    PostCommit,
    generation_rows,
    history_row_key,
    inbox_row_key,
    item_id,
    new_generation,
    partition_key,
    row_size,
    work_row_key,
)
from durable_host.store.azure.index import BUILT
from durable_host.store.azure.partitions import (
    HOSTS_PREFIX,
    HUB_BLOB,
    PARTITIONS_PREFIX,
    HubPartitions,
)
from durable_host.store.azure.rows import HubRows
from durable_host.store.azure.store import AzureStore
from durable_host.transfer.protocol import (
    ActivityDump,
    HubBusyError,
    HubNotEmptyError,
    InboxItem,
    InstanceDump,
    Item,
    NamedText,
)

PARALLEL = 32  # partitions read or written at once (the table client's own limit is 32)
LEASE_WAIT = 8.0  # seconds: a live host renews well within it; a stopped one released it
_TEXTS = (
    ("Input", "input_json"),
    ("Output", "output_json"),
    ("CustomStatus", "custom_status_json"),
)
_NAMED = (("secret", "secrets/"), ("schedule", "schedules/"))


class AzureHub:
    """One Azure Storage task hub under its lease (``HubSource`` and ``HubTarget``)."""

    def __init__(self, store: AzureStore):
        self.store = store  # opened read-only: connected, no lease, no index build
        self.tables = store.tables
        self.rows = HubRows(store.tables)
        self._ids = MessageIds()
        self._renewal: asyncio.Task[None] | None = None

    async def open_quiet(self) -> None:
        await self.store.open()
        await self.tables.create()
        hub = self.store.hub
        partitions = HubPartitions(
            self.tables.container,
            self.store.partition_count,
            self.store.lease_seconds,
            self.tables.writer,
        )
        try:
            await asyncio.wait_for(partitions.prepare(hub), LEASE_WAIT)
            deadline = time.monotonic() + LEASE_WAIT
            while True:
                for unit in partitions.units:
                    await partitions.acquire(unit, None)
                if partitions.held() == set(partitions.units) or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.5)
        except TimeoutError:
            pass
        if partitions.held() != set(partitions.units):
            await partitions.close()
            await self.store.close()
            raise HubBusyError(
                f"task hub {hub} is owned by a running host (its partitions' leases are"
                " held): stop the host first"
            )
        self.tables.fence = partitions
        self._renewal = asyncio.create_task(self._renew(partitions))

    async def _renew(self, partitions: HubPartitions) -> None:
        while True:
            await asyncio.sleep(partitions.seconds / 3)
            await partitions.renew_all()

    async def close(self) -> None:
        if self._renewal is not None:
            self._renewal.cancel()
        await self.store.close()  # gives the leases back

    # --- export -------------------------------------------------------------------------

    async def read(self, *, include_keys: bool) -> AsyncIterator[Item]:
        works: list[ActivityDump] = []
        pages = self.tables.table.query_entities(
            "RowKey eq @head", parameters={"head": HEAD_ROW}, select=["PartitionKey"]
        )
        batch: list[str] = []
        async for entity in pages:
            batch.append(entity["PartitionKey"])
            if len(batch) >= PARALLEL:
                async for dump in self._partitions(batch, works):
                    yield dump
                batch = []
        async for dump in self._partitions(batch, works):
            yield dump
        for work_item in works:
            yield work_item
        for kind, prefix in _NAMED:
            if kind == "secret" and not include_keys:
                continue
            async for blob in self.tables.container.list_blobs(name_starts_with=prefix):
                name = blob.name.removeprefix(prefix)
                value = await getattr(self.store, f"get_{kind}")(name)
                if value is not None:
                    yield NamedText(kind, name, value)

    async def _partitions(
        self, partitions: list[str], works: list[ActivityDump]
    ) -> AsyncIterator[InstanceDump]:
        """A batch of partitions read at once (each is a few round trips), in their order;
        their work items are kept for the end (small rows, as SQLite lists them last)."""
        found = await asyncio.gather(*(self._partition(p) for p in partitions))
        for dump, work in found:
            works.extend(work)
            if dump is not None:
                yield dump

    async def _partition(self, partition: str) -> tuple[InstanceDump | None, list[ActivityDump]]:
        head = await self.tables.read_head(partition)
        if head is None:
            return None, []
        await self.store.commits.settle(partition, head)
        head, attempts, rows = await self.tables.read_partition(partition, "h", WORK_ROWS[1])
        if head is None:
            return None, []
        record = await self.rows.instance_record(partition, head.row)
        history_prefix = generation_rows(head.generation)[0]
        history = sorted(
            (r for r in rows if r["RowKey"].startswith(history_prefix)), key=lambda r: r["RowKey"]
        )[: head.history_count]
        consumed: set[int] = set()
        if PostCommit.CONSUMED in head.pending:
            consumed = set(json.loads(await self.tables.get_text(head.row, "Consumed") or "[]"))
        heads: dict[str, Head | None] = {partition: head}
        inbox: list[InboxItem] = []
        work: list[ActivityDump] = []
        for row in sorted(rows, key=lambda r: r["RowKey"]):
            key = row["RowKey"]
            if INBOX_ROWS[0] <= key < INBOX_ROWS[1]:
                message_id = item_id(key)
                if message_id < head.inbox_floor or message_id in consumed:
                    continue
                if await self.store.commits.is_visible(row, heads):
                    text = await self.tables.get_text(row, "M")
                    inbox.append(InboxItem(text or "", row.get("VisibleAt")))
            elif WORK_ROWS[0] <= key < WORK_ROWS[1] and await self.store.commits.is_visible(
                row, heads
            ):
                item = await self.rows.work_item(row)
                work.append(
                    ActivityDump(
                        item.instance_id,
                        item.execution_id,
                        item.task_id,
                        item.name,
                        item.input_json,
                        item.dequeue_count,
                    )
                )
        texts = [await self.tables.get_text(r, "E") or "" for r in history]
        count = int(attempts.get("Count", 0)) if attempts is not None else 0
        return InstanceDump(record, texts, inbox, count), work

    # --- import -------------------------------------------------------------------------

    async def check_empty(self) -> None:
        found = [r async for r in self._any_row()]
        blobs = [
            b.name
            async for b in self.tables.container.list_blobs()
            if not b.name.startswith((HUB_BLOB, PARTITIONS_PREFIX, HOSTS_PREFIX, "secrets/"))
        ]
        if found or blobs:
            raise HubNotEmptyError(
                f"the target task hub {self.store.hub} is not empty (it holds rows or blobs):"
                " import goes into an empty hub only"
            )

    async def _any_row(self) -> AsyncIterator[Any]:
        async for row in self.tables.table.list_entities(results_per_page=1, select=["RowKey"]):
            yield row
            return

    async def write(self, items: Iterable[Item] | AsyncIterator[Item]) -> int:
        await self.check_empty()
        written: list[str] = []
        count = 0
        batch: list[Item] = []
        try:
            if isinstance(items, AsyncIterator):
                async for item in items:
                    batch.append(item)
                    if len(batch) >= PARALLEL:
                        count += await self._write_batch(batch, written)
                        batch = []
            else:
                for item in items:
                    batch.append(item)
                    if len(batch) >= PARALLEL:
                        count += await self._write_batch(batch, written)
                        batch = []
            count += await self._write_batch(batch, written)
        except BaseException:
            await self._undo(written)
            raise
        # The first host to open the hub builds the index from these rows.
        await self.tables.retry(
            "drop the index mark",
            lambda: self._drop_built_mark(),
            write=True,
        )
        return count

    async def _write_batch(self, batch: list[Item], written: list[str]) -> int:
        """Items written at once: each instance is its own partition (one transaction)."""
        # Note every target before writing, so a failure undoes the ones in flight too.
        results = await asyncio.gather(
            *(self._write(item, written) for item in batch), return_exceptions=True
        )
        for result in results:
            if isinstance(result, BaseException):
                raise result
        return sum(r for r in results if isinstance(r, int))

    async def _drop_built_mark(self) -> None:
        async for _ in self.tables.index.query_entities(
            "PartitionKey eq @pk", parameters={"pk": BUILT[0]}
        ):
            await self.tables.index.delete_entity(*BUILT)
            return

    async def _write(self, item: Item, written: list[str]) -> int:
        if isinstance(item, NamedText):
            prefix = dict(_NAMED)[item.kind]
            written.append("blob:" + prefix + item.name)
            await self.tables.container.upload_blob(
                prefix + item.name, item.value.encode(), overwrite=True
            )
            return 0
        if isinstance(item, ActivityDump):
            partition = partition_key(item.instance_id)
            row = self._row(partition, work_row_key(self._ids.next()))
            row.update(
                ExecutionId=item.execution_id,
                TaskId=item.task_id,
                Name=item.name,
                DequeueCount=item.dequeue_count,
            )
            written.append(partition)
            await self.tables.put_text(row, "Input", item.input_json)
            await self._insert([row])
            return 0
        partition = partition_key(item.record.instance_id)
        written.append(partition)
        await self._insert(await self._instance_rows(partition, item))
        return 1

    def _row(self, partition: str, row_key: str) -> dict[str, Any]:
        return {"PartitionKey": partition, "RowKey": row_key, "W": self.tables.writer}

    async def _instance_rows(self, partition: str, item: InstanceDump) -> list[dict[str, Any]]:
        record, generation = item.record, new_generation()
        ids = [self._ids.next() for _ in item.inbox]
        head = self._row(partition, HEAD_ROW)
        fence = self.tables.fence
        head.update(
            Name=record.name,
            Status=record.status,
            CreatedAt=record.created_at,
            UpdatedAt=record.updated_at,
            Gen=generation,
            Count=len(item.history),
            Floor=f"{0:020d}",
            Epoch=fence.epoch_of(partition) if fence is not None else 0,
            EntityExists=record.entity_exists,
        )
        for key, value in (
            ("ExecutionId", record.execution_id),
            ("Version", record.version),
            ("ParentInstanceId", record.parent_instance_id),
        ):
            if value is not None:
                head[key] = value
        for name, field in _TEXTS:
            await self.tables.put_text(head, name, getattr(record, field))
        await self.tables.put_text(head, "EntityState", record.entity_state)
        rows = [head]
        for seq, text in enumerate(item.history):
            row = {"PartitionKey": partition, "RowKey": history_row_key(generation, seq)}
            await self.tables.put_text(row, "E", text)
            rows.append(row)
        for message_id, message in zip(ids, item.inbox, strict=True):
            row = self._row(partition, inbox_row_key(message_id))
            if message.visible_at is not None:
                row["VisibleAt"] = message.visible_at
            await self.tables.put_text(row, "M", message.message)
            rows.append(row)
        if item.attempts:
            rows.append({"PartitionKey": partition, "RowKey": ATTEMPTS_ROW, "Count": item.attempts})
        return rows

    async def _insert(self, rows: list[dict[str, Any]]) -> None:
        """Rows of one partition, in entity-group transactions within the service's limits."""
        batch: list[dict[str, Any]] = []
        size = 0
        for row in rows:
            if batch and (len(batch) >= BATCH_OPS or size + row_size(row) > BATCH_BYTES):
                await self._send(batch)
                batch, size = [], 0
            batch.append(row)
            size += row_size(row)
        if batch:
            await self._send(batch)

    async def _send(self, rows: list[dict[str, Any]]) -> None:
        ops = [("upsert", row, {"mode": UpdateMode.REPLACE}) for row in rows]
        await self.tables.transact(ops)

    async def _undo(self, written: list[str]) -> None:
        """Delete what this import wrote (its partitions and blobs) after a failed write."""
        for target in dict.fromkeys(written):
            if target.startswith("blob:"):
                await self.tables.drop_blob(target.removeprefix("blob:"))
                continue
            rows = await self.tables.query_rows(target, "", "~", select=["RowKey"])
            await self.tables.delete_rows(target, [r["RowKey"] for r in rows])
        await self.tables.delete_blobs("p/")
