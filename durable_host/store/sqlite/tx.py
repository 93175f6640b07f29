"""The SQLite task hub's machinery under the port: the connection, its one thread, group
commit, the file's ownership, and the episode records kept in memory.

``SqliteTx`` is the base of ``sqlite.SqliteStore``; it knows nothing of instances beyond the
record cache's trigger, and ``sqlite.py`` writes every port method on it with ``_run`` (a
read on the store thread), ``_write`` (a write in a group commit) and ``_tx`` (a transaction
of its own).

WAL journal with ``synchronous=FULL``: every commit is on disk when it returns, so an
accepted request or a committed episode survives a kill of everything. All SQL runs on
one dedicated thread, which serialises access to the single connection and keeps the
event loop free.

Group commit: writes that queue up while the thread is busy (most often waiting for the
previous commit's fsync) are applied in one transaction, each in a savepoint of its own,
and made durable by one COMMIT; each caller hears of its write only after that COMMIT. A
write whose body fails is rolled back to its savepoint and fails alone; a COMMIT that
fails fails them all (unless the nonce shows it applied). One fsync then serves many
episodes, messages and starts, which is what bounds throughput on one file.

Episode records from memory (``SqliteStore.episode_record``): the engine reads an
instance's record before each episode, and that read was a hand-off to the store thread and
back for a row this store had itself just written. The store keeps the rows of instances it
read for an episode, or wrote by a start or an episode commit (read back after the COMMIT);
a TEMP trigger on ``instances`` drops an instance's entry from inside any statement that
inserts, updates or deletes its row - whichever write path, the API's included - and only
the store thread fills entries, reading the committed row, so an entry is never older than
the last write the thread ran. Status reads by the API still go to the file.

One host process per file (``sqlite_guard``): an exclusive lock on the database file
itself - whatever path, symlink or hard link reaches it - makes a second host refuse to
start; every write transaction checks the owner epoch and that the path still names the
locked file. ``open`` refuses a corrupt file (``PRAGMA quick_check``). SQLite's errors leave
the store as the port's: ``StoreFailedError`` for a passing failure (full disk, I/O),
``StoreLostError`` when this host can no longer use the file (taken over, removed,
replaced, corrupt); from then on every call raises it and ``on_lost`` is told once, so the
host stops.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import sqlite3
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from durable_host.core.records import InstanceRecord
from durable_host.ops import faults
from durable_host.store.base import StoreError, StoreLostError
from durable_host.store.codec import COLUMNS, instance_record
from durable_host.store.sqlite.guard import (
    OWNER_SCHEMA,
    FileOwnership,
    StoreFaults,
    translate,
)
from durable_host.store.sqlite.sql import SCHEMA

T = TypeVar("T")
log = logging.getLogger("durable_host.store.sqlite")
IDENTITY_CHECK_SECONDS = 1.0  # reads notice a removed or replaced file within this time
MAX_EPISODE_RECORDS = 10_000  # instance rows kept for the next episode (module doc)


@dataclass(slots=True)
class _Write:
    """One write waiting for the store thread: its body runs inside a group's transaction,
    ``after`` (if any) on the store thread once that transaction committed."""

    operation: str
    body: Callable[[sqlite3.Connection], Any]
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Any]
    after: Callable[[sqlite3.Connection], None] | None = None

    def settle(self, value: Any = None, error: BaseException | None = None) -> None:
        """From the store thread: hand the outcome to the waiting caller (first one wins)."""

        def deliver() -> None:
            if self.future.done():
                return
            if error is not None:
                self.future.set_exception(error)
            else:
                self.future.set_result(value)

        self.loop.call_soon_threadsafe(deliver)


class SqliteTx:
    """One SQLite file, its thread and its group commit (see module docstring)."""

    def __init__(
        self, path: Path, read_only: bool = False, on_lost: Callable[[str], None] | None = None
    ):
        """``on_lost(reason)`` is called once, on the event loop, when the store is lost.

        ``read_only``: for tools beside a running host (the ``keys`` command): no lock is
        taken and no ownership claimed, and only the host secrets may be written (SQLite
        serialises those writes with the host's own)."""
        self.path = Path(path)
        self.read_only = read_only
        self._db: sqlite3.Connection | None = None
        self._owner = FileOwnership(self.path)
        self._faults = StoreFaults()
        self._on_lost = on_lost
        self._lost: StoreLostError | None = None
        self._checked = 0.0  # monotonic time of the last identity check
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite")
        self._writes: collections.deque[_Write] = collections.deque()  # for the next group
        # Episode records (module doc): filled on the store thread only, read on the loop.
        self._records: dict[str, InstanceRecord | None] = {}

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        if self._lost is not None:
            raise self._lost
        loop = asyncio.get_running_loop()
        return await self._translated(loop.run_in_executor(self._pool, self._call, fn))

    async def _translated(self, outcome: Awaitable[T]) -> T:
        """Await ``outcome`` (SQL on the store thread), its errors as the port's."""
        try:
            return await outcome
        except sqlite3.Error as exc:
            error = translate(exc, self.path)
            if error is exc:
                raise
            if isinstance(error, StoreLostError):
                self._lose(error)
            raise error from exc
        except StoreLostError as exc:
            self._lose(exc)
            raise

    def _lose(self, error: StoreLostError) -> None:
        if self._lost is None:
            self._lost = error
            log.critical("%s", error)
            if self._on_lost is not None:
                self._on_lost(str(error))

    def _call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        assert self._db is not None, "store is not open"
        now = time.monotonic()
        if not self.read_only and now - self._checked > IDENTITY_CHECK_SECONDS:
            self._owner.check()
            self._checked = now
        return fn(self._db)

    def _tx(
        self, db: sqlite3.Connection, body: Callable[[sqlite3.Connection], T], operation: str
    ) -> T:
        db.execute("BEGIN IMMEDIATE")
        try:
            nonce = self._owner.fence(db)
            result = body(db)
            faults.hit("store.before_commit")
            self._faults.before(operation)
            self._owner.check()
        except BaseException as exc:
            self._rollback(db, exc)
            raise
        self._commit(db, nonce, operation)
        self._after(operation)
        return result

    def _commit(self, db: sqlite3.Connection, nonce: int, what: str) -> None:
        """COMMIT the open transaction stamped ``nonce``; a COMMIT that reports an error
        but applied stands (the error alone does not tell: the file is asked)."""
        try:
            db.execute("COMMIT")
        except sqlite3.Error as exc:
            self._rollback(db, exc)
            if not self._owner.applied(db, nonce):
                raise
            log.warning("%s reported %r after it had applied; it stands", what, exc)

    def _after(self, operation: str) -> None:
        """The injected after-commit failure of ``operation``: its write applied, so it stands."""
        try:
            self._faults.after(operation)
        except sqlite3.Error as exc:
            log.warning("%s reported %r after it had applied; it stands", operation, exc)

    @staticmethod
    def _rollback(db: sqlite3.Connection, exc: BaseException) -> None:
        # SQLite rolls a transaction back by itself after some failures (a full disk):
        # a second rollback would fail and hide the error that matters.
        if db.in_transaction:
            try:
                db.execute("ROLLBACK")
            except sqlite3.Error:
                log.warning("rollback after %r failed", exc, exc_info=True)

    async def _write(
        self,
        operation: str,
        body: Callable[[sqlite3.Connection], T],
        after: Callable[[sqlite3.Connection], None] | None = None,
    ) -> T:
        """Run ``body`` in a write transaction (shared with the writes queued beside it);
        ``after`` once it committed, before the caller hears of it."""
        if self._lost is not None:
            raise self._lost
        loop = asyncio.get_running_loop()
        write = _Write(operation, body, loop, loop.create_future(), after)
        self._writes.append(write)
        # One drain per write: the first to run takes every write queued by then, the
        # others find the queue empty. The thread runs them in order with the reads.
        self._pool.submit(self._drain)
        return await self._translated(write.future)

    def _drain(self) -> None:
        batch: list[_Write] = []
        while self._writes:
            batch.append(self._writes.popleft())
        if not batch:
            return
        try:
            self._call(lambda db: self._group(db, batch))
        except BaseException as exc:  # noqa: BLE001 - handed to every caller of the group
            for write in batch:
                write.settle(error=exc)  # writes settled already keep their outcome

    def _group(self, db: sqlite3.Connection, batch: list[_Write]) -> None:
        """One transaction for ``batch``: each write in a savepoint, one COMMIT for all."""
        db.execute("BEGIN IMMEDIATE")
        try:
            nonce = self._owner.fence(db)
        except BaseException as exc:
            self._rollback(db, exc)
            raise
        applied: list[tuple[_Write, Any]] = []
        for n, write in enumerate(batch):
            db.execute("SAVEPOINT write")
            try:
                value = write.body(db)
                faults.hit("store.before_commit")
                self._faults.before(write.operation)
            except BaseException as exc:  # noqa: BLE001 - the write's own failure, its caller's
                if not db.in_transaction:
                    # SQLite ended the whole transaction (e.g. a full disk): nothing applies.
                    for failed in [*(w for w, _ in applied), *batch[n:]]:
                        failed.settle(error=exc)
                    return
                db.execute("ROLLBACK TO write")
                db.execute("RELEASE write")
                write.settle(error=exc)
                continue
            db.execute("RELEASE write")
            applied.append((write, value))
        if not applied:
            db.execute("ROLLBACK")
            return
        try:
            self._owner.check()
        except BaseException as exc:
            self._rollback(db, exc)
            raise
        self._commit(db, nonce, f"a commit of {len(applied)} writes")
        for write, value in applied:
            self._after(write.operation)
            if write.after is not None:
                try:
                    write.after(db)
                except sqlite3.Error:
                    log.warning("after %s", write.operation, exc_info=True)
            write.settle(value)

    async def open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.read_only:
            await asyncio.get_running_loop().run_in_executor(self._pool, self._connect_beside)
            return
        self._owner.lock()

        def connect() -> None:
            db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            try:
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=FULL")
                problems = [r[0] for r in db.execute("PRAGMA quick_check(5)")]
                if problems != ["ok"]:
                    raise sqlite3.DatabaseError(
                        "database disk image is malformed: " + "; ".join(problems)
                    )
                db.executescript(SCHEMA + OWNER_SCHEMA)
                self._watch_instances(db)
                self._owner.claim(db)
            except BaseException:
                db.close()
                raise
            self._db = db

        try:
            await asyncio.get_running_loop().run_in_executor(self._pool, connect)
        except sqlite3.Error as exc:
            self._owner.unlock()
            error = translate(exc, self.path)
            if isinstance(error, StoreError):
                raise error from exc
            raise
        except BaseException:
            self._owner.unlock()
            raise

    def _watch_instances(self, db: sqlite3.Connection) -> None:
        """Any statement that writes an instance's row drops its episode record (module doc)."""
        db.create_function("forget_record", 1, self._forget_record)
        for event, row in (("INSERT", "NEW"), ("UPDATE", "NEW"), ("DELETE", "OLD")):
            db.execute(
                f"CREATE TEMP TRIGGER IF NOT EXISTS forget_on_{event.lower()} AFTER {event}"
                f" ON instances BEGIN SELECT forget_record({row}.instance_id); END"
            )

    def _forget_record(self, instance_id: str) -> None:
        self._records.pop(instance_id, None)

    def _remember_record(self, db: sqlite3.Connection, instance_id: str) -> InstanceRecord | None:
        """On the store thread: read the committed row and keep it (bounded, oldest out)."""
        row = db.execute(
            f"SELECT {COLUMNS} FROM instances WHERE instance_id=?", (instance_id,)
        ).fetchone()
        record = instance_record(row) if row else None
        self._records.pop(instance_id, None)  # re-inserted as the newest
        self._records[instance_id] = record
        while len(self._records) > MAX_EPISODE_RECORDS:
            self._records.pop(next(iter(self._records)))
        return record

    def _connect_beside(self) -> None:
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        db.executescript(SCHEMA)
        self._db = db

    async def close(self) -> None:
        def shut() -> None:
            if self._db is not None:
                self._db.close()
                self._db = None

        await asyncio.get_running_loop().run_in_executor(self._pool, shut)
        self._pool.shutdown(wait=True)
        if not self.read_only:
            self._owner.unlock()

    def _remembering(self, instance_id: str) -> Callable[[sqlite3.Connection], None]:
        """After an episode's commit: keep the row it wrote for the instance's next one."""

        def remember(db: sqlite3.Connection) -> None:
            self._remember_record(db, instance_id)

        return remember
