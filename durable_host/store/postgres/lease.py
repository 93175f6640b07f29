"""Ownership of a task hub on PostgreSQL: one row, one owner, an epoch, a standby.

The row ``lease (id=1, owner, epoch, expires_at)`` names the host that may write. ``acquire``
takes it when it is free, expired (by the server's clock: hosts' clocks never matter), or
held by a process of this machine that no longer exists (a SIGKILLed host restarted takes
over at once); the epoch grows by one with every takeover. Otherwise the host waits as a
standby and tries again every ``STANDBY_POLL`` seconds. A background task renews the
expiry every third of the lease; a renewal that finds another epoch means the hub was
taken over: the store is lost (``Database.lose``).

Expiry only decides when a standby may take over. Safety rests on the fence: every write
transaction locks the lease row ``FOR KEY SHARE`` with this host's epoch
(``Database._fence``), and a takeover locks it ``FOR UPDATE`` first, so it waits for the
commits in flight and every later commit of the old owner finds no row with its epoch.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

import psycopg
from psycopg_pool import PoolTimeout

from durable_host.store.azure.lease import is_dead_process_here, process_identity
from durable_host.store.postgres.database import Conn, Database

log = logging.getLogger("durable_host.store.postgres")
STANDBY_POLL = 1.0


class HubLease:
    def __init__(self, db: Database) -> None:
        self.db = db
        self.owner = f"{process_identity()}|{uuid.uuid4().hex[:8]}"
        self._task: asyncio.Task[None] | None = None

    @property
    def seconds(self) -> int:
        return self.db.settings.lease_seconds

    async def acquire(self) -> int:
        """Take the hub, waiting as a standby while another live host holds it; the epoch."""
        announced = False
        while True:
            taken, holder = await self.db.read(self._try_take)
            if taken is not None:
                self.db.epoch = taken
                self._task = asyncio.create_task(self._renew_loop())
                return taken
            if not announced:
                log.warning(
                    "task hub %s is owned by %s; this host waits as a standby and takes over"
                    " when that host stops renewing its lease",
                    self.db.settings.hub,
                    holder,
                )
                announced = True
            await asyncio.sleep(STANDBY_POLL)

    async def _try_take(self, conn: Conn) -> tuple[int | None, str]:
        async with conn.transaction():
            cur = await self.db.execute(
                conn,
                "SELECT owner, expires_at < clock_timestamp() FROM lease WHERE id = 1 FOR UPDATE",
            )
            row = await cur.fetchone()
            assert row is not None, "the lease row is created with the schema"
            holder, expired = row[0], bool(row[1])
            if holder is not None and not expired and not is_dead_process_here(holder):
                return None, str(holder)
            cur = await self.db.execute(
                conn,
                "UPDATE lease SET owner = %s, epoch = epoch + 1,"
                " expires_at = clock_timestamp() + make_interval(secs => %s)"
                " WHERE id = 1 RETURNING epoch",
                (self.owner, self.seconds),
            )
            taken = await cur.fetchone()
            assert taken is not None
            return int(taken[0]), str(holder)

    async def _renew_loop(self) -> None:
        while self.db.lost is None:
            await asyncio.sleep(self.seconds / 3)
            try:
                held = await self.db.read(self._renew)
            except Exception as exc:  # noqa: BLE001 - the next round tries again
                log.warning("could not renew the task hub lease: %s", exc)
                continue
            if not held:
                self.db.lose(
                    f"another host took over task hub {self.db.settings.hub} on"
                    f" {self.db.settings.describe()} (this host's epoch {self.db.epoch})"
                )
                return

    async def _renew(self, conn: Conn) -> bool:
        cur = await self.db.execute(
            conn,
            "UPDATE lease SET expires_at = clock_timestamp() + make_interval(secs => %s)"
            " WHERE id = 1 AND epoch = %s AND owner = %s RETURNING 1",
            (self.seconds, self.db.epoch, self.owner),
        )
        return await cur.fetchone() is not None

    async def release(self) -> None:
        """Stop renewing and hand the hub back at once (a standby need not wait)."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        if self.db.epoch is None or self.db.lost is not None or self.db.pool is None:
            return

        async def free(conn: Conn) -> Any:
            return await self.db.execute(
                conn,
                "UPDATE lease SET owner = NULL, expires_at = '-infinity'"
                " WHERE id = 1 AND epoch = %s AND owner = %s",
                (self.db.epoch, self.owner),
            )

        try:
            await asyncio.wait_for(self.db.read(free), timeout=5.0)
        except (psycopg.Error, PoolTimeout, TimeoutError, Exception) as exc:  # noqa: BLE001
            log.warning("could not release the task hub lease: %s", exc)
