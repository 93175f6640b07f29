"""The transfer protocol on the embedded SQLite store: a hub file read or written whole.

Both sides take the file the way a host does (``FileOwnership``: the exclusive lock), so a
running host makes them fail at once with ``HubBusyError``; an import also claims a new owner
epoch before it writes, so a host that somehow kept writing is fenced off. Neither writes
anything before that: a refused import leaves the file's bytes as they were. Export reads in one read transaction (a consistent
snapshot), an instance at a time. Import writes everything in one transaction after checking
the hub is empty inside it: a failure anywhere (a bad line found late, a full disk, a crash)
rolls it all back. Inbox messages and work items get new ids in their original order (ids
only ever order them and name them within one process).
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import Any

from durable_host.store.base import StoreLockedError
from durable_host.store.codec import COLUMNS, instance_record, instance_values
from durable_host.store.sqlite.guard import OWNER_SCHEMA, FileOwnership
from durable_host.store.sqlite.sql import SCHEMA
from durable_host.transfer.protocol import (
    ActivityDump,
    HubBusyError,
    HubNotEmptyError,
    InboxItem,
    InstanceDump,
    Item,
    NamedText,
)

_PAGE = 500
_CONTENT = ("instances", "inbox", "activities", "schedules")
# Every table of the store's schema and what becomes of it here (a test keeps this complete):
# the owner row is the file's own, never moved.
TABLES = {
    "instances": "moved",
    "history": "moved",
    "inbox": "moved",
    "attempts": "moved",
    "activities": "moved",
    "schedules": "moved",
    "host_secrets": "moved with --include-keys",
    "owner": "the file's own",
}


class SqliteHub:
    """One SQLite hub file, locked for a transfer (``HubSource`` and ``HubTarget``)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._owner = FileOwnership(self.path)
        self._db: sqlite3.Connection | None = None

    async def open_quiet(self) -> None:
        await asyncio.to_thread(self._open)

    def _open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._owner.lock()
        except StoreLockedError as exc:
            raise HubBusyError(f"{exc}: stop the host first") from None
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=FULL")
            db.executescript(SCHEMA + OWNER_SCHEMA)
        except BaseException:
            db.close()
            self._owner.unlock()
            raise
        self._db = db

    async def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
        self._owner.unlock()

    @property
    def db(self) -> sqlite3.Connection:
        assert self._db is not None, "open_quiet first"
        return self._db

    # --- export -------------------------------------------------------------------------

    async def read(self, *, include_keys: bool) -> AsyncIterator[Item]:
        db = self.db
        db.execute("BEGIN")  # one snapshot for the whole export
        try:
            after = ""
            while True:
                # A page per thread hop: one instance each would cost more than its reads.
                dumps = await asyncio.to_thread(self._page, after)
                for dump in dumps:
                    yield dump
                if len(dumps) < _PAGE:
                    break
                after = dumps[-1].record.instance_id
            for row in db.execute(
                "SELECT instance_id, execution_id, task_id, name, input, dequeue_count"
                " FROM activities ORDER BY id"
            ):
                yield ActivityDump(*row)
            for name, value in db.execute("SELECT name, value FROM schedules ORDER BY name"):
                yield NamedText("schedule", name, value)
            if include_keys:
                for name, value in db.execute("SELECT name, value FROM host_secrets ORDER BY name"):
                    yield NamedText("secret", name, value)
        finally:
            db.execute("COMMIT")

    def _page(self, after: str) -> list[InstanceDump]:
        rows = self.db.execute(
            f"SELECT {COLUMNS} FROM instances WHERE instance_id > ? ORDER BY instance_id LIMIT ?",
            (after, _PAGE),
        ).fetchall()
        return [self._dump(row) for row in rows]

    def _dump(self, row: tuple[Any, ...]) -> InstanceDump:
        record = instance_record(row)
        instance_id = record.instance_id
        db = self.db
        history = [
            e
            for (e,) in db.execute(
                "SELECT event FROM history WHERE instance_id=? ORDER BY seq", (instance_id,)
            )
        ]
        inbox = [
            InboxItem(m, v)
            for m, v in db.execute(
                "SELECT message, visible_at FROM inbox WHERE instance_id=? ORDER BY id",
                (instance_id,),
            )
        ]
        found = db.execute("SELECT count FROM attempts WHERE instance_id=?", (instance_id,))
        attempts = found.fetchone()
        return InstanceDump(record, history, inbox, int(attempts[0]) if attempts else 0)

    # --- import -------------------------------------------------------------------------

    async def check_empty(self) -> None:
        await asyncio.to_thread(self._check_empty, False)

    def _check_empty(self, keys: bool) -> None:
        tables = (*_CONTENT, "host_secrets") if keys else _CONTENT
        held = [
            f"{n} {t}"
            for t in tables
            if (n := self.db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0])
        ]
        if held:
            raise HubNotEmptyError(
                f"the target hub {self.path} is not empty ({', '.join(held)}): import goes"
                " into an empty hub only"
            )

    async def write(self, items: Iterable[Item] | AsyncIterator[Item]) -> int:
        db = self.db
        self._owner.claim(db)  # a new owner epoch: a host that kept the file is fenced off
        db.execute("BEGIN IMMEDIATE")
        try:
            self._owner.fence(db)
            self._check_empty(False)
            count = 0
            if isinstance(items, AsyncIterator):
                async for item in items:
                    count += self._insert(item)
            else:
                count = await asyncio.to_thread(lambda: sum(self._insert(i) for i in items))
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        return count

    def _insert(self, item: Item) -> int:
        db = self.db
        if isinstance(item, ActivityDump):
            db.execute(
                "INSERT INTO activities (instance_id, execution_id, task_id, name, input,"
                " dequeue_count) VALUES (?,?,?,?,?,?)",
                (
                    item.instance_id,
                    item.execution_id,
                    item.task_id,
                    item.name,
                    item.input_json,
                    item.dequeue_count,
                ),
            )
            return 0
        if isinstance(item, NamedText):
            table = "schedules" if item.kind == "schedule" else "host_secrets"
            # A secret the target already made for itself gives way to the exported one.
            db.execute(
                f"INSERT OR REPLACE INTO {table} (name, value) VALUES (?, ?)",
                (item.name, item.value),
            )
            return 0
        r = item.record
        db.execute(
            f"INSERT INTO instances ({COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
            instance_values(r),
        )
        db.executemany(
            "INSERT INTO history (instance_id, seq, event) VALUES (?,?,?)",
            [(r.instance_id, seq, text) for seq, text in enumerate(item.history)],
        )
        db.executemany(
            "INSERT INTO inbox (instance_id, message, visible_at) VALUES (?,?,?)",
            [(r.instance_id, m.message, m.visible_at) for m in item.inbox],
        )
        if item.attempts:
            db.execute(
                "INSERT INTO attempts (instance_id, count) VALUES (?,?)",
                (r.instance_id, item.attempts),
            )
        return 1
