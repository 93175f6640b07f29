"""The embedded SQLite task hub: one file, one host process.

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

Episode records from memory (``episode_record``): the engine reads an instance's record
before each episode, and that read was a hand-off to the store thread and back for a row
this store had itself just written. The store keeps the rows of instances it read for an
episode, or wrote by a start or an episode commit (read back after the COMMIT); a TEMP
trigger on ``instances`` drops an instance's entry from inside any statement that inserts,
updates or deletes its row - whichever write path, the API's included - and only the store
thread fills entries, reading the committed row, so an entry is never older than the last
write the thread ran. Status reads by the API still go
to the file.

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
import copy
import logging
import sqlite3
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from durable_host import faults
from durable_host.records import (
    ActivityWork,
    Completion,
    EntityCommit,
    Episode,
    InstanceRecord,
    Query,
    QueryPage,
    RuntimeStatus,
)
from durable_host.store import codec
from durable_host.store.base import InstanceExistsError, StoreError, StoreLostError
from durable_host.store.sqlite_guard import (
    OWNER_SCHEMA,
    FileOwnership,
    StoreFaults,
    translate,
)
from durable_host.store.sqlite_sql import (
    COLUMNS,
    SCHEMA,
    complete_work,
    delete_inbox,
    filters,
    instance_record,
    purge_ids,
    update_instance,
    write_outbox,
)

T = TypeVar("T")
log = logging.getLogger("durable_host.store.sqlite")
IDENTITY_CHECK_SECONDS = 1.0  # reads notice a removed or replaced file within this time
MAX_EPISODE_RECORDS = 10_000  # instance rows kept for the next episode (module doc)
# One transaction deletes a work item per completion: no limit worth having below this.
MAX_STEP_COMPLETIONS = 1000


class _WorkGone(Exception):
    """A step's work item was already completed: its transaction applies nothing."""


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


class SqliteStore:
    """Store port on one SQLite file (see module docstring)."""

    round_trips: int | None = None  # no network: nothing to count
    max_step_completions: int = MAX_STEP_COMPLETIONS

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

    # --- instances -------------------------------------------------------------------

    async def create_instance(
        self,
        record: InstanceRecord,
        start_message: dict[str, Any],
        overridable: tuple[str, ...],
        visible_at: str | None = None,
        *,
        count_first: bool = False,
    ) -> int | None:
        def body(db: sqlite3.Connection) -> int | None:
            row = db.execute(
                "SELECT status FROM instances WHERE instance_id=?", (record.instance_id,)
            ).fetchone()
            if row is not None and row[0] not in overridable:
                raise InstanceExistsError(record.instance_id, row[0])
            if row is not None:
                # A restarted id starts clean: old history and undelivered messages go.
                db.execute("DELETE FROM history WHERE instance_id=?", (record.instance_id,))
                db.execute("DELETE FROM inbox WHERE instance_id=?", (record.instance_id,))
            db.execute(
                f"INSERT OR REPLACE INTO instances ({COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    record.instance_id,
                    record.name,
                    record.status,
                    record.execution_id,
                    record.version,
                    record.input_json,
                    None,
                    None,
                    record.created_at,
                    record.updated_at,
                    record.parent_instance_id,
                    None,
                    0,
                ),
            )
            inserted = db.execute(
                "INSERT INTO inbox (instance_id, message, visible_at) VALUES (?,?,?)",
                (record.instance_id, codec.encode(start_message), visible_at),
            )
            if not count_first:
                return None
            db.execute(
                "INSERT OR REPLACE INTO attempts (instance_id, count) VALUES (?, 1)",
                (record.instance_id,),
            )
            return inserted.lastrowid

        # The first episode reads this row: keep it (module doc, "Episode records").
        created: int | None = await self._write(
            "create_instance", body, self._remembering(record.instance_id)
        )
        return created

    async def send(
        self, instance_id: str, message: dict[str, Any], now: str, status: str | None = None
    ) -> None:
        def body(db: sqlite3.Connection) -> None:
            db.execute(
                "INSERT INTO inbox (instance_id, message, visible_at) VALUES (?,?,NULL)",
                (instance_id, codec.encode(message)),
            )
            if status is not None:
                db.execute(
                    "UPDATE instances SET status=?, updated_at=? WHERE instance_id=?",
                    (status, now, instance_id),
                )

        await self._write("send", body)

    async def get_instance(self, instance_id: str) -> InstanceRecord | None:
        def read(db: sqlite3.Connection) -> InstanceRecord | None:
            row = db.execute(
                f"SELECT {COLUMNS} FROM instances WHERE instance_id=?", (instance_id,)
            ).fetchone()
            return instance_record(row) if row else None

        return await self._run(read)

    async def episode_record(self, instance_id: str) -> InstanceRecord | None:
        """``get_instance`` for the engine's next episode, from memory when this store
        wrote or read the row last (module doc); a copy the caller may keep."""
        if self._lost is not None:
            raise self._lost
        try:
            kept = self._records[instance_id]
        except KeyError:
            return await self._run(lambda db: copy.copy(self._remember_record(db, instance_id)))
        return copy.copy(kept)

    async def get_history(self, instance_id: str) -> list[dict[str, Any]]:
        def read(db: sqlite3.Connection) -> list[dict[str, Any]]:
            rows = db.execute(
                "SELECT seq, event FROM history WHERE instance_id=? ORDER BY seq", (instance_id,)
            )
            return [codec.decode_event(instance_id, seq, text) for seq, text in rows]

        return await self._run(read)

    async def fetch_messages(
        self, instance_id: str, now: str, limit: int = 1000
    ) -> list[tuple[int, dict[str, Any]]]:
        def read(db: sqlite3.Connection) -> list[tuple[int, dict[str, Any]]]:
            rows = db.execute(
                "SELECT id, message FROM inbox WHERE instance_id=?"
                " AND (visible_at IS NULL OR visible_at<=?) ORDER BY id LIMIT ?",
                (instance_id, now, limit),
            )
            return [(r[0], codec.decode_message(r[1])) for r in rows]

        return await self._run(read)

    # --- commits ---------------------------------------------------------------------

    async def commit_episode(
        self, instance_id: str, episode: Episode, now: str, *, count_next: bool = False
    ) -> list[ActivityWork]:
        def body(db: sqlite3.Connection) -> list[ActivityWork]:
            return self._apply_episode(db, instance_id, episode, now, count_next)

        return await self._write("commit_episode", body, self._remembering(instance_id))

    async def commit_step(
        self,
        instance_id: str,
        completions: list[Completion],
        episode: Episode,
        now: str,
        *,
        count_next: bool = False,
    ) -> list[ActivityWork] | None:
        def body(db: sqlite3.Connection) -> list[ActivityWork]:
            for completion in completions:
                if not complete_work(db, instance_id, completion):
                    raise _WorkGone  # another run reported it: roll everything back
            created = self._apply_episode(db, instance_id, episode, now, count_next)
            faults.hit("store.before_step_commit")  # the step's commit point is next
            return created

        try:
            return await self._write("commit_step", body, self._remembering(instance_id))
        except _WorkGone:
            return None

    def _remembering(self, instance_id: str) -> Callable[[sqlite3.Connection], None]:
        """After an episode's commit: keep the row it wrote for the instance's next one."""

        def remember(db: sqlite3.Connection) -> None:
            self._remember_record(db, instance_id)

        return remember

    @staticmethod
    def _apply_episode(
        db: sqlite3.Connection, instance_id: str, episode: Episode, now: str, count_next: bool
    ) -> list[ActivityWork]:
        delete_inbox(db, episode.consumed)
        if count_next:
            db.execute(
                "INSERT OR REPLACE INTO attempts (instance_id, count) VALUES (?, 1)",
                (instance_id,),
            )
        else:
            db.execute("DELETE FROM attempts WHERE instance_id=?", (instance_id,))
        if episode.replace_history or episode.rewrite_history:
            db.execute("DELETE FROM history WHERE instance_id=?", (instance_id,))
            start = 0
        else:
            row = db.execute(
                "SELECT COALESCE(MAX(seq)+1, 0) FROM history WHERE instance_id=?",
                (instance_id,),
            ).fetchone()
            start = row[0]
        db.executemany(
            "INSERT INTO history (instance_id, seq, event) VALUES (?,?,?)",
            [(instance_id, start + i, codec.encode(e)) for i, e in enumerate(episode.events)],
        )
        update_instance(db, instance_id, episode, now)
        return write_outbox(db, episode)

    async def commit_entity(self, commit: EntityCommit) -> None:
        def body(db: sqlite3.Connection) -> None:
            delete_inbox(db, commit.consumed)
            db.execute("DELETE FROM attempts WHERE instance_id=?", (commit.instance_id,))
            name = codec.entity_name(commit.instance_id)
            db.execute(
                "INSERT INTO instances (instance_id, name, status, created_at, updated_at,"
                " entity_state, entity_exists) VALUES (?,?,?,?,?,?,?)"
                " ON CONFLICT(instance_id) DO UPDATE SET updated_at=excluded.updated_at,"
                " entity_state=excluded.entity_state, entity_exists=excluded.entity_exists,"
                " status=excluded.status",
                (
                    commit.instance_id,
                    name,
                    RuntimeStatus.RUNNING,
                    commit.now,
                    commit.now,
                    commit.state_json,
                    int(commit.exists),
                ),
            )
            db.executemany(
                "INSERT INTO inbox (instance_id, message, visible_at) VALUES (?,?,NULL)",
                [(target, codec.encode(msg)) for target, msg in commit.responses],
            )

        await self._write("commit_entity", body)

    async def complete_activity(
        self, work_id: int, instance_id: str, message: dict[str, Any], now: str
    ) -> bool:
        def body(db: sqlite3.Connection) -> bool:
            return complete_work(db, instance_id, Completion(work_id, message, consumed=False))

        return await self._write("complete_activity", body)

    async def pending_activities(self) -> list[ActivityWork]:
        def read(db: sqlite3.Connection) -> list[ActivityWork]:
            rows = db.execute(
                "SELECT id, instance_id, execution_id, task_id, name, input, dequeue_count"
                " FROM activities ORDER BY id"
            )
            return [ActivityWork(*r) for r in rows]

        return await self._run(read)

    async def mark_activity_dequeued(self, work_id: int) -> int:
        def body(db: sqlite3.Connection) -> int:
            db.execute("UPDATE activities SET dequeue_count=dequeue_count+1 WHERE id=?", (work_id,))
            row = db.execute("SELECT dequeue_count FROM activities WHERE id=?", (work_id,))
            found = row.fetchone()
            return int(found[0]) if found else 0

        return await self._write("mark_activity_dequeued", body)

    async def release_activity(self, work_id: int) -> None:
        """Undo one dequeue: the run was abandoned by a graceful stop, it did not crash."""

        def body(db: sqlite3.Connection) -> None:
            db.execute(
                "UPDATE activities SET dequeue_count=MAX(dequeue_count-1, 0) WHERE id=?",
                (work_id,),
            )

        await self._write("release_activity", body)

    async def begin_attempt(self, instance_id: str) -> int:
        """Count one more attempt at the instance's next episode; committing resets it."""

        def body(db: sqlite3.Connection) -> int:
            db.execute(
                "INSERT INTO attempts (instance_id, count) VALUES (?, 1)"
                " ON CONFLICT(instance_id) DO UPDATE SET count=count+1",
                (instance_id,),
            )
            row = db.execute("SELECT count FROM attempts WHERE instance_id=?", (instance_id,))
            return int(row.fetchone()[0])

        def counted(db: sqlite3.Connection) -> int:
            # The count must outlive a crash of this process, not of the machine: skipping
            # the fsync keeps this write off the episode's critical path (a lost count
            # after a power cut only allows one more attempt).
            db.execute("PRAGMA synchronous=NORMAL")
            try:
                return self._tx(db, body, "begin_attempt")
            finally:
                db.execute("PRAGMA synchronous=FULL")

        return await self._run(counted)

    async def release_attempt(self, instance_id: str) -> None:
        """Undo one count: the attempt a commit counted in advance never began (a stop)."""

        def body(db: sqlite3.Connection) -> None:
            db.execute(
                "UPDATE attempts SET count=MAX(count-1, 0) WHERE instance_id=?", (instance_id,)
            )

        await self._write("release_attempt", body)

    async def ready_instances(self, now: str, due_only: bool = False) -> list[str]:
        """Instances with visible messages (``due_only``: only those with due timers)."""

        def read(db: sqlite3.Connection) -> list[str]:
            # Arrival order: the instance whose oldest visible message is oldest first.
            sql = (
                "SELECT instance_id FROM inbox WHERE visible_at<=?"
                if due_only
                else "SELECT instance_id FROM inbox WHERE visible_at IS NULL OR visible_at<=?"
            )
            rows = db.execute(sql + " GROUP BY instance_id ORDER BY MIN(id)", (now,))
            return [r[0] for r in rows]

        return await self._run(read)

    async def next_due(self, now: str) -> str | None:
        def read(db: sqlite3.Connection) -> str | None:
            row = db.execute(
                "SELECT MIN(visible_at) FROM inbox WHERE visible_at>?", (now,)
            ).fetchone()
            return row[0] if row else None

        return await self._run(read)

    async def poll(self) -> tuple[list[str], list[ActivityWork]]:
        """Never returns: only this process writes the file, and it is told of all its work."""
        never: asyncio.Future[tuple[list[str], list[ActivityWork]]]
        never = asyncio.get_running_loop().create_future()
        return await never

    # --- queries and purge ------------------------------------------------------------

    async def query(self, query: Query) -> QueryPage:
        def read(db: sqlite3.Connection) -> QueryPage:
            where, args = filters(query)
            limit = query.top if query.top and query.top > 0 else -1
            rows = db.execute(
                f"SELECT {COLUMNS} FROM instances WHERE {where} ORDER BY instance_id LIMIT ?",
                (*args, limit),
            ).fetchall()
            records = [instance_record(r) for r in rows]
            token = records[-1].instance_id if limit > 0 and len(records) == limit else None
            return QueryPage(records, token)

        return await self._run(read)

    async def purge(self, instance_id: str) -> int:
        def body(db: sqlite3.Connection) -> int:
            return purge_ids(db, [instance_id])

        return await self._write("purge", body)

    async def purge_many(self, query: Query) -> int:
        """Purge the terminal instances ``query`` matches; running ones are never purged."""
        terminal = codec.purgeable(query)
        if terminal is None:
            return 0

        def body(db: sqlite3.Connection) -> int:
            where, args = filters(terminal)
            ids = [
                r[0] for r in db.execute(f"SELECT instance_id FROM instances WHERE {where}", args)
            ]
            return purge_ids(db, ids)

        return await self._write("purge_many", body)

    # --- host secrets and timer-trigger schedules: named values, changed by compare-and-swap ---

    async def get_secret(self, name: str) -> str | None:
        return await self._get_named("host_secrets", name)

    async def swap_secret(self, name: str, expected: str | None, value: str) -> bool:
        # Unfenced: a tool beside the host (read-only: no ownership) must be able to change keys.
        return await self._swap_named("host_secrets", name, expected, value, fenced=False)

    async def get_schedule(self, name: str) -> str | None:
        return await self._get_named("schedules", name)

    async def swap_schedule(self, name: str, expected: str | None, value: str) -> bool:
        # Fenced like every write of the owner: a stale host must not claim an occurrence.
        return await self._swap_named("schedules", name, expected, value, fenced=True)

    async def _get_named(self, table: str, name: str) -> str | None:
        def body(db: sqlite3.Connection) -> str | None:
            row = db.execute(f"SELECT value FROM {table} WHERE name=?", (name,)).fetchone()
            return None if row is None else str(row[0])

        return await self._run(body)

    async def _swap_named(
        self, table: str, name: str, expected: str | None, value: str, *, fenced: bool
    ) -> bool:
        # Its own transaction, not ``_tx``: a key change or a claimed occurrence is no episode,
        # so it must not count towards the ``store.before_commit`` fault point of crash tests.
        def swap(db: sqlite3.Connection) -> bool:
            db.execute("BEGIN IMMEDIATE")
            try:
                if fenced:
                    self._owner.fence(db)
                row = db.execute(f"SELECT value FROM {table} WHERE name=?", (name,)).fetchone()
                if (None if row is None else row[0]) != expected:
                    db.execute("ROLLBACK")
                    return False
                db.execute(
                    f"INSERT OR REPLACE INTO {table} (name, value) VALUES (?,?)", (name, value)
                )
                db.execute("COMMIT")
            except BaseException as exc:
                self._rollback(db, exc)
                raise
            return True

        return await self._run(swap)
