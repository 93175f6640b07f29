"""LISTEN/NOTIFY: an idle host hears of work another process wrote at once, not at its
next sweep.

Every message a start or a send appends also sends ``pg_notify(<hub channel>, "<writer>
<instance id>")`` in the same statement (``PostgresStore._message``); PostgreSQL delivers
it when, and only if, that transaction commits. ``Listener.wait`` holds one connection of
its own that LISTENs on the channel and returns the instance ids that other writers
notified (a process ignores its own: its engine was told already). A lost listening
connection is opened again at the next wait, with back-off; meanwhile the sweep finds the
work (``store.SWEEP_SECONDS``).
"""

from __future__ import annotations

import asyncio
import logging
import time

import psycopg
from psycopg import sql

from durable_host.store.postgres.database import Conn, Database

log = logging.getLogger("durable_host.store.postgres")
RECONNECT_MAX = 10.0


class Listener:
    def __init__(self, db: Database, writer: str) -> None:
        self.db = db
        self.writer = writer.replace(" ", "_")
        self._conn: Conn | None = None
        self._retry_at = 0.0
        self._delay = 0.5
        self.epoch = 0  # counts the listening connections opened: notes between two are lost

    @property
    def listening(self) -> bool:
        """Whether notifications are being received (a connection is open)."""
        return self._conn is not None and not self._conn.closed

    def payload(self, instance_id: str) -> str:
        return f"{self.writer} {instance_id}"

    async def _connection(self) -> Conn | None:
        if self._conn is not None and not self._conn.closed:
            return self._conn
        if time.monotonic() < self._retry_at:
            return None
        try:
            conn = await self.db.connect()
            await conn.execute(
                sql.SQL("LISTEN {}").format(sql.Identifier(self.db.settings.channel))
            )
        except Exception as exc:  # noqa: BLE001 - the sweep covers until it is back
            self._retry_at = time.monotonic() + self._delay
            self._delay = min(self._delay * 2, RECONNECT_MAX)
            log.debug("could not LISTEN: %s", exc)
            return None
        self._delay = 0.5
        self._conn = conn
        self.epoch += 1
        return conn

    async def wait(self, timeout: float) -> list[str]:
        """Wait up to ``timeout`` seconds for notifications of other writers; their
        instance ids (returns at the first batch)."""
        conn = await self._connection()
        if conn is None:
            await asyncio.sleep(min(timeout, max(0.0, self._retry_at - time.monotonic())))
            return []
        found: list[str] = []
        deadline = time.monotonic() + timeout
        try:
            while not found and (left := deadline - time.monotonic()) > 0:
                async for note in conn.notifies(timeout=left, stop_after=1):
                    writer, _, instance_id = note.payload.partition(" ")
                    if writer != self.writer and instance_id:
                        found.append(instance_id)
            # Take what else has arrived already, without waiting.
            async for note in conn.notifies(timeout=0.0):
                writer, _, instance_id = note.payload.partition(" ")
                if writer != self.writer and instance_id and instance_id not in found:
                    found.append(instance_id)
        except psycopg.Error as exc:
            log.debug("LISTEN connection lost: %s", exc)
            await self.close()
        return found

    async def close(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            try:
                await conn.close()
            except psycopg.Error:
                pass
