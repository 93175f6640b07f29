"""The embedded SQLite task hub: one file, one host process.

WAL journal with ``synchronous=FULL``: every commit is on disk when it returns, so an
accepted request or a committed episode survives a kill of everything. One host process
per file, enforced with an exclusive ``flock`` on ``<file>.lock`` (a second host refuses
with a clear message). All SQL runs on one dedicated thread, which serialises access
to the single connection and keeps the event loop free.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from durable_host import faults
from durable_host.records import (
    ActivityWork,
    EntityCommit,
    Episode,
    InstanceRecord,
    OutgoingKind,
    Query,
    QueryPage,
    RuntimeStatus,
)
from durable_host.store import codec
from durable_host.store.base import InstanceExistsError, StoreLockedError

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS instances (
    instance_id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    status TEXT NOT NULL,
    execution_id TEXT,
    version TEXT,
    input TEXT,
    output TEXT,
    custom_status TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    parent_instance_id TEXT,
    entity_state TEXT,
    entity_exists INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS instances_created ON instances(created_at);
CREATE TABLE IF NOT EXISTS history (
    instance_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    event TEXT NOT NULL,
    PRIMARY KEY (instance_id, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS inbox (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    instance_id TEXT NOT NULL,
    message TEXT NOT NULL,
    visible_at TEXT
);
CREATE INDEX IF NOT EXISTS inbox_instance ON inbox(instance_id, id);
CREATE INDEX IF NOT EXISTS inbox_due ON inbox(visible_at) WHERE visible_at IS NOT NULL;
CREATE TABLE IF NOT EXISTS attempts (
    instance_id TEXT PRIMARY KEY,
    count INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS activities (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    instance_id TEXT NOT NULL,
    execution_id TEXT NOT NULL,
    task_id INTEGER NOT NULL,
    name TEXT NOT NULL,
    input TEXT,
    dequeue_count INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS host_secrets (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;
"""

_COLUMNS = (
    "instance_id, name, status, execution_id, version, input, output, custom_status,"
    " created_at, updated_at, parent_instance_id, entity_state, entity_exists"
)


def _record(row: tuple[Any, ...]) -> InstanceRecord:
    return InstanceRecord(
        instance_id=row[0],
        name=row[1],
        status=row[2],
        execution_id=row[3],
        version=row[4],
        input_json=row[5],
        output_json=row[6],
        custom_status_json=row[7],
        created_at=row[8],
        updated_at=row[9],
        parent_instance_id=row[10],
        entity_state=row[11],
        entity_exists=bool(row[12]),
    )


class SqliteStore:
    """Store port on one SQLite file (see module docstring)."""

    round_trips: int | None = None  # no network: nothing to count

    def __init__(self, path: Path, read_only: bool = False):
        """``read_only``: for tools beside a running host (the ``keys`` command): no lock is
        taken, and only the host secrets may be written (SQLite serialises those writes)."""
        self.path = Path(path)
        self.read_only = read_only
        self._db: sqlite3.Connection | None = None
        self._lock_fd: int | None = None
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite")

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, self._call, fn)

    def _call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        assert self._db is not None, "store is not open"
        return fn(self._db)

    def _tx(self, db: sqlite3.Connection, body: Callable[[sqlite3.Connection], T]) -> T:
        db.execute("BEGIN IMMEDIATE")
        try:
            result = body(db)
            faults.hit("store.before_commit")
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return result

    async def open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.read_only:
            await asyncio.get_running_loop().run_in_executor(self._pool, self._connect)
            return
        fd = os.open(f"{self.path}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StoreLockedError(
                f"Another durable host is already using {self.path}; the embedded SQLite"
                " store allows one host process per file."
            ) from None
        self._lock_fd = fd
        await asyncio.get_running_loop().run_in_executor(self._pool, self._connect)

    def _connect(self) -> None:
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        db.executescript(_SCHEMA)
        self._db = db

    async def close(self) -> None:
        def shut() -> None:
            if self._db is not None:
                self._db.close()
                self._db = None

        await asyncio.get_running_loop().run_in_executor(self._pool, shut)
        self._pool.shutdown(wait=True)
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    # --- instances -------------------------------------------------------------------

    async def create_instance(
        self,
        record: InstanceRecord,
        start_message: dict[str, Any],
        overridable: tuple[str, ...],
        visible_at: str | None = None,
    ) -> None:
        def body(db: sqlite3.Connection) -> None:
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
                f"INSERT OR REPLACE INTO instances ({_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    record.instance_id, record.name, record.status, record.execution_id,
                    record.version, record.input_json, None, None, record.created_at,
                    record.updated_at, record.parent_instance_id, None, 0,
                ),
            )
            db.execute(
                "INSERT INTO inbox (instance_id, message, visible_at) VALUES (?,?,?)",
                (record.instance_id, codec.encode(start_message), visible_at),
            )

        await self._run(lambda db: self._tx(db, body))

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

        await self._run(lambda db: self._tx(db, body))

    async def get_instance(self, instance_id: str) -> InstanceRecord | None:
        def read(db: sqlite3.Connection) -> InstanceRecord | None:
            row = db.execute(
                f"SELECT {_COLUMNS} FROM instances WHERE instance_id=?", (instance_id,)
            ).fetchone()
            return _record(row) if row else None

        return await self._run(read)

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
        self, instance_id: str, episode: Episode, now: str
    ) -> list[ActivityWork]:
        def body(db: sqlite3.Connection) -> list[ActivityWork]:
            _delete_inbox(db, episode.consumed)
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
            _update_instance(db, instance_id, episode, now)
            return _write_outbox(db, episode)

        return await self._run(lambda db: self._tx(db, body))

    async def commit_entity(self, commit: EntityCommit) -> None:
        def body(db: sqlite3.Connection) -> None:
            _delete_inbox(db, commit.consumed)
            db.execute("DELETE FROM attempts WHERE instance_id=?", (commit.instance_id,))
            name = codec.entity_name(commit.instance_id)
            db.execute(
                "INSERT INTO instances (instance_id, name, status, created_at, updated_at,"
                " entity_state, entity_exists) VALUES (?,?,?,?,?,?,?)"
                " ON CONFLICT(instance_id) DO UPDATE SET updated_at=excluded.updated_at,"
                " entity_state=excluded.entity_state, entity_exists=excluded.entity_exists,"
                " status=excluded.status",
                (
                    commit.instance_id, name, RuntimeStatus.RUNNING, commit.now, commit.now,
                    commit.state_json, int(commit.exists),
                ),
            )
            db.executemany(
                "INSERT INTO inbox (instance_id, message, visible_at) VALUES (?,?,NULL)",
                [(target, codec.encode(msg)) for target, msg in commit.responses],
            )

        await self._run(lambda db: self._tx(db, body))

    async def complete_activity(
        self, work_id: int, instance_id: str, message: dict[str, Any], now: str
    ) -> bool:
        def body(db: sqlite3.Connection) -> bool:
            gone = db.execute("DELETE FROM activities WHERE id=?", (work_id,)).rowcount == 0
            if gone:
                return False  # another run already reported this task
            db.execute(
                "INSERT INTO inbox (instance_id, message, visible_at) VALUES (?,?,NULL)",
                (instance_id, codec.encode(message)),
            )
            return True

        return await self._run(lambda db: self._tx(db, body))

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
            db.execute(
                "UPDATE activities SET dequeue_count=dequeue_count+1 WHERE id=?", (work_id,)
            )
            row = db.execute("SELECT dequeue_count FROM activities WHERE id=?", (work_id,))
            found = row.fetchone()
            return int(found[0]) if found else 0

        return await self._run(lambda db: self._tx(db, body))

    async def release_activity(self, work_id: int) -> None:
        """Undo one dequeue: the run was abandoned by a graceful stop, it did not crash."""

        def body(db: sqlite3.Connection) -> None:
            db.execute(
                "UPDATE activities SET dequeue_count=MAX(dequeue_count-1, 0) WHERE id=?",
                (work_id,),
            )

        await self._run(lambda db: self._tx(db, body))

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
                return self._tx(db, body)
            finally:
                db.execute("PRAGMA synchronous=FULL")

        return await self._run(counted)

    async def ready_instances(self, now: str, due_only: bool = False) -> list[str]:
        """Instances with visible messages (``due_only``: only those with due timers)."""

        def read(db: sqlite3.Connection) -> list[str]:
            sql = (
                "SELECT DISTINCT instance_id FROM inbox WHERE visible_at<=?"
                if due_only
                else "SELECT DISTINCT instance_id FROM inbox WHERE visible_at IS NULL OR visible_at<=?"
            )
            rows = db.execute(sql, (now,))
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
            where, args = _filters(query)
            limit = query.top if query.top and query.top > 0 else -1
            rows = db.execute(
                f"SELECT {_COLUMNS} FROM instances WHERE {where} ORDER BY instance_id LIMIT ?",
                (*args, limit),
            ).fetchall()
            records = [_record(r) for r in rows]
            token = records[-1].instance_id if limit > 0 and len(records) == limit else None
            return QueryPage(records, token)

        return await self._run(read)

    async def purge(self, instance_id: str) -> int:
        def body(db: sqlite3.Connection) -> int:
            return _purge_ids(db, [instance_id])

        return await self._run(lambda db: self._tx(db, body))

    async def purge_many(self, query: Query) -> int:
        def body(db: sqlite3.Connection) -> int:
            where, args = _filters(query)
            ids = [r[0] for r in db.execute(f"SELECT instance_id FROM instances WHERE {where}", args)]
            return _purge_ids(db, ids)

        return await self._run(lambda db: self._tx(db, body))

    # --- host secrets ---------------------------------------------------------------------

    async def get_secret(self, name: str) -> str | None:
        def body(db: sqlite3.Connection) -> str | None:
            row = db.execute("SELECT value FROM host_secrets WHERE name=?", (name,)).fetchone()
            return None if row is None else str(row[0])

        return await self._run(body)

    async def swap_secret(self, name: str, expected: str | None, value: str) -> bool:
        # Its own transaction, not ``_tx``: a key change is no episode, so it must not count
        # towards the ``store.before_commit`` fault point that crash tests aim at.
        def swap(db: sqlite3.Connection) -> bool:
            db.execute("BEGIN IMMEDIATE")
            try:
                row = db.execute("SELECT value FROM host_secrets WHERE name=?", (name,)).fetchone()
                if (None if row is None else row[0]) != expected:
                    db.execute("ROLLBACK")
                    return False
                db.execute(
                    "INSERT OR REPLACE INTO host_secrets (name, value) VALUES (?,?)", (name, value)
                )
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            return True

        return await self._run(swap)


def _delete_inbox(db: sqlite3.Connection, ids: list[int]) -> None:
    db.executemany("DELETE FROM inbox WHERE id=?", [(i,) for i in ids])


def _update_instance(db: sqlite3.Connection, instance_id: str, episode: Episode, now: str) -> None:
    if episode.replace_history:
        db.execute(
            "UPDATE instances SET execution_id=?, name=?, input=?, version=?,"
            " parent_instance_id=?, output=NULL, custom_status=NULL WHERE instance_id=?",
            (
                episode.execution_id, episode.name, episode.input_json, episode.version,
                codec.parent_instance_id(episode), instance_id,
            ),
        )
        if db.execute("SELECT 1 FROM instances WHERE instance_id=?", (instance_id,)).fetchone() is None:
            # Sub-orchestrations are created by their first episode, not by a client call.
            db.execute(
                f"INSERT INTO instances ({_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    instance_id, episode.name, RuntimeStatus.RUNNING, episode.execution_id,
                    episode.version, episode.input_json, None, None, now, now,
                    codec.parent_instance_id(episode), None, 0,
                ),
            )
    sets, args = ["updated_at=?"], [now]
    if episode.status is not None:
        sets.append("status=?")
        args.append(episode.status)
    if codec.writes_output(episode):
        sets.append("output=?")
        args.append(episode.output_json)
    if episode.custom_status_changed:
        sets.append("custom_status=?")
        args.append(episode.custom_status_json)
    db.execute(f"UPDATE instances SET {', '.join(sets)} WHERE instance_id=?", (*args, instance_id))


def _write_outbox(db: sqlite3.Connection, episode: Episode) -> list[ActivityWork]:
    created: list[ActivityWork] = []
    for item in episode.outbox:
        if item.kind == OutgoingKind.ACTIVITY:
            p = item.payload
            cursor = db.execute(
                "INSERT INTO activities (instance_id, execution_id, task_id, name, input,"
                " dequeue_count) VALUES (?,?,?,?,?,1)",
                (p["instance_id"], p["execution_id"], p["task_id"], p["name"], p["input_json"]),
            )
            assert cursor.lastrowid is not None
            created.append(
                ActivityWork(
                    cursor.lastrowid, p["instance_id"], p["execution_id"], p["task_id"],
                    p["name"], p["input_json"], 1,
                )
            )
        else:
            db.execute(
                "INSERT INTO inbox (instance_id, message, visible_at) VALUES (?,?,?)",
                (item.target, codec.encode(item.payload), item.visible_at),
            )
    return created


def _filters(query: Query) -> tuple[str, list[Any]]:
    where, args = ["1=1"], []
    if query.entities is True:
        where.append("instance_id LIKE '@%'")
    elif query.entities is False:
        where.append("instance_id NOT LIKE '@%'")
    for column, op, value in (
        ("created_at", ">=", query.created_from),
        ("created_at", "<=", query.created_to),
        ("updated_at", ">=", query.updated_from),
        ("updated_at", "<=", query.updated_to),
        ("instance_id", ">", query.continuation),
    ):
        if value is not None:
            where.append(f"{column}{op}?")
            args.append(value)
    if query.statuses:
        where.append(f"status IN ({','.join('?' * len(query.statuses))})")
        args.extend(query.statuses)
    if query.prefix:
        where.append("substr(instance_id, 1, ?)=?")
        args.extend([len(query.prefix), query.prefix])
    return " AND ".join(where), args


def _purge_ids(db: sqlite3.Connection, ids: list[str]) -> int:
    count = 0
    for instance_id in ids:
        count += db.execute("DELETE FROM instances WHERE instance_id=?", (instance_id,)).rowcount
        db.execute("DELETE FROM history WHERE instance_id=?", (instance_id,))
        db.execute("DELETE FROM inbox WHERE instance_id=?", (instance_id,))
        db.execute("DELETE FROM activities WHERE instance_id=?", (instance_id,))
        db.execute("DELETE FROM attempts WHERE instance_id=?", (instance_id,))
    return count
