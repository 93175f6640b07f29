"""The embedded SQLite task hub: one file, one host process - the ``Store`` port's methods.

Every method is one read on the store thread or one write, most of them in a group commit
(``sqlite_tx.py``: the connection, its thread, group commit, the file's ownership, the
errors, and the episode records kept in memory); the SQL they share lives in
``sqlite_sql.py``. An episode's commit (``commit_episode``, ``commit_step``) is one
transaction: history, status, consumed inbox messages, outbox and, for a step, the activity
results it took - all or nothing. A step whose work item another run completed first applies
nothing and returns None. ``create_instance``, ``commit_*`` and ``episode_record`` keep the
instance's row for its next episode.
"""

from __future__ import annotations

import asyncio
import copy
import sqlite3
from typing import Any

from durable_host.core.records import (
    ActivityWork,
    Completion,
    EntityCommit,
    Episode,
    InstanceRecord,
    Query,
    QueryPage,
    RuntimeStatus,
)
from durable_host.ops import faults
from durable_host.store import codec
from durable_host.store.base import InstanceExistsError
from durable_host.store.codec import COLUMNS, instance_record
from durable_host.store.sqlite.sql import (
    complete_work,
    delete_inbox,
    filters,
    purge_ids,
    update_instance,
    write_outbox,
)
from durable_host.store.sqlite.tx import SqliteTx

# One transaction deletes a work item per completion: no limit worth having below this.
MAX_STEP_COMPLETIONS = 1000


class _WorkGone(Exception):
    """A step's work item was already completed: its transaction applies nothing."""


class SqliteStore(SqliteTx):
    """Store port on one SQLite file (see module docstring)."""

    round_trips: int | None = None  # no network: nothing to count
    max_step_completions: int = MAX_STEP_COMPLETIONS

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
