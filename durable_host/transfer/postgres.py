"""The transfer protocol on PostgreSQL: a hub's schema read or written whole.

The store is opened read-only (its schema created or migrated, no lease taken by the store
itself); the transfer then takes **every partition's lease row** (``partitions``) the way a
host takes a partition: free, expired by the server's clock, or held by a process of this
machine that no longer exists. A row a live host holds makes it fail at once with ``HubBusyError`` instead of
waiting as a standby. Each row taken gets a new epoch, so a host that somehow kept writing is
fenced off, and the rows are renewed in the background for as long as the transfer runs;
``close`` hands them back (owner cleared, expired) so a host starts at once.

Export reads in one ``REPEATABLE READ READ ONLY`` transaction (one snapshot), a page of
instances at a time, with their histories, inboxes and attempts read per page. Import
writes everything in one transaction: the partition rows are share-locked with this transfer's
owner (``FOR KEY SHARE``, the host's fence: renewals go on, a takeover waits), the hub is
checked empty inside it, and the records are copied in pages (``COPY``); a failure anywhere
(a bad line found late, a full disk, a crash) rolls it all back. Inbox messages and work
items get new ids in their original order.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterable
from typing import Any

import psycopg

from durable_host.ops import faults
from durable_host.store.azure.lease import is_dead_process_here
from durable_host.store.codec import COLUMNS, instance_record, instance_values
from durable_host.store.postgres.database import Conn
from durable_host.store.postgres.store import PostgresStore
from durable_host.transfer.protocol import (
    ActivityDump,
    HubBusyError,
    HubNotEmptyError,
    InboxItem,
    InstanceDump,
    Item,
    NamedText,
)

log = logging.getLogger("durable_host.transfer")
_PAGE = 500
_CONTENT = ("instances", "inbox", "activities", "schedules")
# Every table of the store's schema and what becomes of it here (a test keeps this complete).
TABLES = {
    "instances": "moved",
    "history": "moved",
    "inbox": "moved",
    "attempts": "moved",
    "activities": "moved",
    "schedules": "moved",
    "host_secrets": "moved with --include-keys",
    "lease": "the single-owner lease of schema version 1, taken for good by version 2",
    "partitions": "the hub's ownership (every row held by the transfer, never moved)",
    "hosts": "the live hosts' heartbeats",
    "meta": "the schema's own",
}


class PostgresHub:
    """One hub's schema, held for a transfer (``HubSource`` and ``HubTarget``)."""

    def __init__(self, store: PostgresStore):
        assert store.read_only, "the transfer takes the lease rows itself"
        self.store = store
        self.owner = f"{store.owner}|transfer"
        self._held = 0  # lease rows taken
        self._renewing: asyncio.Task[None] | None = None

    @property
    def hub(self) -> str:
        return f"task hub {self.store.settings.hub} on {self.store.settings.describe()}"

    async def open_quiet(self) -> None:
        await self.store.open()
        try:
            self._held = await self.store.db.write("taking the hub", self._take, fault=False)
        except BaseException:
            await self.store.close()
            raise
        self._renewing = asyncio.create_task(self._renew_loop())

    async def _take(self, conn: Conn) -> int:
        # A new hub gets its partition rows as a host's first start makes them, so a host
        # started during the import finds them held.
        await conn.execute(
            "INSERT INTO meta (key, value) VALUES ('partition_count', %s)"
            " ON CONFLICT (key) DO NOTHING",
            (str(self.store.partition_count),),
        )
        await conn.execute(
            "INSERT INTO partitions (unit, owner, epoch, expires_at)"
            " SELECT u, NULL, 0, '-infinity' FROM generate_series(0,"
            " (SELECT value::int FROM meta WHERE key = 'partition_count') - 1) AS u"
            " ON CONFLICT (unit) DO NOTHING"
        )
        cur = await conn.execute(
            "SELECT owner, expires_at < clock_timestamp() FROM partitions ORDER BY unit FOR UPDATE"
        )
        for holder, expired in await cur.fetchall():
            if holder is not None and not expired and not is_dead_process_here(holder):
                raise HubBusyError(
                    f"{self.hub} is served by a host ({holder}): stop the host first"
                )
        cur = await conn.execute(
            "UPDATE partitions SET owner = %s, epoch = epoch + 1,"
            " expires_at = clock_timestamp() + make_interval(secs => %s)",
            (self.owner, self.store.settings.lease_seconds),
        )
        return cur.rowcount

    async def _renew_loop(self) -> None:
        seconds = self.store.settings.lease_seconds
        while True:
            await asyncio.sleep(seconds / 3)

            async def renew(conn: Conn) -> int:
                cur = await conn.execute(
                    "UPDATE partitions SET expires_at = clock_timestamp()"
                    " + make_interval(secs => %s)"
                    " WHERE owner = %s",
                    (seconds, self.owner),
                )
                return cur.rowcount

            try:
                if await self.store.db.read(renew) != self._held:
                    # The fence of the import's transaction refuses it; an export's snapshot
                    # was taken while the hub was held, so what it reads stays consistent.
                    log.warning("%s was taken over during the transfer", self.hub)
                    return
            except Exception as exc:  # noqa: BLE001 - the next round tries again
                log.warning("could not renew the transfer's hold on %s: %s", self.hub, exc)

    async def close(self) -> None:
        if self._renewing is not None:
            self._renewing.cancel()
            await asyncio.gather(self._renewing, return_exceptions=True)
            self._renewing = None

            async def free(conn: Conn) -> None:
                await conn.execute(
                    "UPDATE partitions SET owner = NULL, expires_at = '-infinity' WHERE owner = %s",
                    (self.owner,),
                )

            try:
                await self.store.db.read(free)
            except Exception as exc:  # noqa: BLE001 - the rows expire on their own
                log.warning("could not hand %s back: %s", self.hub, exc)
        await self.store.close()

    # --- export -------------------------------------------------------------------------

    async def read(self, *, include_keys: bool) -> AsyncIterator[Item]:
        pool = self.store.db.pool
        assert pool is not None, "open_quiet first"
        try:
            async with pool.connection() as conn, conn.transaction():
                await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                after = ""
                while True:
                    dumps = await _page(conn, after)
                    for dump in dumps:
                        yield dump
                    if len(dumps) < _PAGE:
                        break
                    after = dumps[-1].record.instance_id
                cur = await conn.execute(
                    "SELECT instance_id, execution_id, task_id, name, input, dequeue_count"
                    " FROM activities ORDER BY id"
                )
                async for row in cur:
                    yield ActivityDump(*row)
                kinds = [("schedule", "schedules")]
                if include_keys:
                    kinds.append(("secret", "host_secrets"))
                for kind, table in kinds:
                    cur = await conn.execute(f"SELECT name, value FROM {table} ORDER BY name")
                    for name, value in await cur.fetchall():
                        yield NamedText(kind, name, value)
        except psycopg.Error as exc:
            raise self.store.db.failed("export failed", exc) from None

    # --- import -------------------------------------------------------------------------

    async def check_empty(self) -> None:
        pool = self.store.db.pool
        assert pool is not None, "open_quiet first"
        async with pool.connection() as conn:
            await self._check_empty(conn)

    async def _check_empty(self, conn: Conn) -> None:
        held = []
        for table in _CONTENT:
            cur = await conn.execute(f"SELECT COUNT(*) FROM {table}")
            row = await cur.fetchone()
            if row and row[0]:
                held.append(f"{row[0]} {table}")
        if held:
            raise HubNotEmptyError(
                f"the target {self.hub} is not empty ({', '.join(held)}): import goes into an"
                " empty hub only"
            )

    async def write(self, items: Iterable[Item] | AsyncIterator[Item]) -> int:
        pool = self.store.db.pool
        assert pool is not None, "open_quiet first"
        try:
            async with pool.connection() as conn, conn.transaction():
                # The fence, as a host's: the rows this transfer took, still its own, share
                # locked until COMMIT (renewals go on; a takeover waits for the COMMIT).
                cur = await conn.execute(
                    "SELECT 1 FROM partitions WHERE owner = %s FOR KEY SHARE", (self.owner,)
                )
                if len(await cur.fetchall()) != self._held:
                    raise HubBusyError(f"{self.hub} was taken over by a host during the import")
                await self._check_empty(conn)
                batch = _Batch()
                if isinstance(items, AsyncIterator):
                    async for item in items:
                        if batch.add(item):
                            await batch.flush(conn)
                else:
                    for item in items:
                        if batch.add(item):
                            await batch.flush(conn)
                await batch.flush(conn)
                return batch.instances
        except psycopg.Error as exc:
            raise self.store.db.failed("import failed", exc) from None


async def _page(conn: Conn, after: str) -> list[InstanceDump]:
    cur = await conn.execute(
        f"SELECT {COLUMNS} FROM instances WHERE instance_id > %s ORDER BY instance_id LIMIT %s",
        (after, _PAGE),
    )
    dumps = {r.instance_id: InstanceDump(r) for r in map(instance_record, await cur.fetchall())}
    if not dumps:
        return []
    ids = list(dumps)
    cur = await conn.execute(
        "SELECT instance_id, event FROM history WHERE instance_id = ANY(%s)"
        " ORDER BY instance_id, seq",
        (ids,),
    )
    for instance_id, event in await cur.fetchall():
        dumps[instance_id].history.append(event)
    cur = await conn.execute(
        "SELECT instance_id, message, visible_at FROM inbox WHERE instance_id = ANY(%s)"
        " ORDER BY id",
        (ids,),
    )
    for instance_id, message, visible_at in await cur.fetchall():
        dumps[instance_id].inbox.append(InboxItem(message, visible_at))
    cur = await conn.execute(
        "SELECT instance_id, count FROM attempts WHERE instance_id = ANY(%s)", (ids,)
    )
    for instance_id, count in await cur.fetchall():
        dumps[instance_id].attempts = int(count)
    return list(dumps.values())


class _Batch:
    """Rows gathered for one round of ``COPY`` per table."""

    def __init__(self) -> None:
        self.instances = 0
        self.rows: dict[str, list[tuple[Any, ...]]] = {}

    def _row(self, table: str, row: tuple[Any, ...]) -> None:
        self.rows.setdefault(table, []).append(row)

    def add(self, item: Item) -> bool:
        """Take ``item``; True when the batch is full."""
        if isinstance(item, ActivityDump):
            self._row(
                "activities (instance_id, execution_id, task_id, name, input, dequeue_count)",
                (
                    item.instance_id,
                    item.execution_id,
                    item.task_id,
                    item.name,
                    item.input_json,
                    item.dequeue_count,
                ),
            )
        elif isinstance(item, NamedText):
            self._row(item.kind, (item.name, item.value))
        else:
            r = item.record
            self._row(
                f"instances ({COLUMNS})",
                (*instance_values(r)[:-1], r.entity_exists),
            )
            for seq, text in enumerate(item.history):
                self._row("history (instance_id, seq, event)", (r.instance_id, seq, text))
            for m in item.inbox:
                self._row(
                    "inbox (instance_id, message, visible_at)",
                    (r.instance_id, m.message, m.visible_at),
                )
            if item.attempts:
                self._row("attempts (instance_id, count)", (r.instance_id, item.attempts))
            self.instances += 1
        return sum(map(len, self.rows.values())) >= 20 * _PAGE

    async def flush(self, conn: Conn) -> None:
        for target, rows in self.rows.items():
            if target in ("schedule", "secret"):
                table = "schedules" if target == "schedule" else "host_secrets"
                # A secret the target already made for itself gives way to the exported one.
                async with conn.cursor() as cur:
                    await cur.executemany(
                        f"INSERT INTO {table} (name, value) VALUES (%s, %s)"
                        " ON CONFLICT (name) DO UPDATE SET value = excluded.value",
                        rows,
                    )
                continue
            async with (
                conn.cursor() as cur,
                cur.copy(f"COPY {target} FROM STDIN") as copy,
            ):
                for row in rows:
                    await copy.write_row(row)
        self.rows.clear()
        faults.hit("transfer.import.page")  # crash tests: SIGKILL with a page copied
