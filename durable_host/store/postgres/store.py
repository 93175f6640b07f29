"""``PostgresStore``: the Store port (``store/base.py``) on one schema of a PostgreSQL database.

Each operation is one transaction (``database.Database.write``): an episode's inbox
deletions, history, status row, attempts and outgoing messages and activities commit
together or not at all. The task hub is a schema (``schema``), so several hubs share a
database. Several hosts share a hub (``docs/postgres.md``): its instances fall into
``partition_count`` partitions (``ownership.partition_of``), each owned by one host at a
time (``partitions``), balanced by the host's ``membership`` rounds. An owner write (an
episode, an entity batch, an attempt's count) is fenced by its partition's epoch in the
same transaction; starts, events, purges and activity completions come from any host, and
every message NOTIFYs the hub's listeners, so its owner hears of it at once. Activity work
is any host's: the committing host's claim (``claimed_by``) holds while its heartbeat
does; a claim of a host that is gone is taken over with ``FOR UPDATE SKIP LOCKED``. Hosts
of several app versions share a hub as on the Azure store (``versions``).

``poll`` wakes at once on a NOTIFY from another writer (``listen``), and sweeps the hub
every ``SWEEP_SECONDS`` (within a second of taking a partition) for work nobody was told about: instances of owned partitions with
visible messages that this process has not touched for ``STALE_SECONDS`` (a dispatch lost
with a commit that reported a failure but applied; all of them once a partition was
taken) and activity work items nobody live claims that it never handed to its engine,
found so by two sweeps in a row (a commit's caller hears of its work items a moment after
the COMMIT made them visible) or claimed by a host that is gone (taken at once).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from durable_host.cluster.membership import Membership
from durable_host.cluster.ownership import DEFAULT_PARTITIONS, Member
from durable_host.core import history as h
from durable_host.core.records import (
    ActivityWork,
    Completion,
    EntityCommit,
    InstanceRecord,
    Query,
    QueryPage,
    RuntimeStatus,
)
from durable_host.core.versioning import MatchStrategy, Parking, VersionPolicy
from durable_host.store import codec
from durable_host.store.azure.lease import process_identity
from durable_host.store.base import InstanceExistsError, StoreError
from durable_host.store.codec import COLUMNS, instance_record
from durable_host.store.postgres import functions as fn
from durable_host.store.postgres import sql as q
from durable_host.store.postgres.backlog import hub_backlog
from durable_host.store.postgres.database import Conn, Database
from durable_host.store.postgres.episodes import EpisodeCommits
from durable_host.store.postgres.listen import Listener
from durable_host.store.postgres.partitions import HubPartitions
from durable_host.store.postgres.schema import SchemaTooNewError, migrate
from durable_host.store.postgres.settings import PostgresSettings
from durable_host.store.postgres.versions import SideBySide
from durable_host.store.query import POSTGRES, instance_filters

log = logging.getLogger("durable_host.store.postgres")
MAX_STEP_COMPLETIONS = 1000  # one statement per completion: no limit worth having below this
MAX_RECORDS = 10_000  # instance rows kept for the next episode (memory bound)
SWEEP_SECONDS = 5.0
STALE_SECONDS = 30.0
# A work item is claimable when nobody claims it or its claimer's heartbeat is gone.
CLAIMABLE = (
    "(claimed_by IS NULL OR claimed_by = %(me)s OR NOT EXISTS (SELECT 1 FROM hosts"
    " WHERE hosts.id = activities.claimed_by AND hosts.expires_at > clock_timestamp()))"
)


class PostgresStore(EpisodeCommits):
    """Store port on PostgreSQL (module docstring)."""

    max_step_completions: int = MAX_STEP_COMPLETIONS

    def __init__(
        self,
        settings: PostgresSettings,
        *,
        on_lost: Callable[[str], None] | None = None,
        read_only: bool = False,
        partition_count: int = DEFAULT_PARTITIONS,
        version: str = "",
        policy: VersionPolicy | None = None,
    ) -> None:
        """``read_only``: for tools beside a running host: no partition held, so no owner
        write (starts, events, purges and secrets are any host's); ``version``, ``policy``:
        the app's ``defaultVersion`` and version policy, announced in the heartbeat
        (``versions``)."""
        self.settings = settings
        self.read_only = read_only
        self.partition_count = partition_count
        self.version = version
        self.policy = policy or VersionPolicy()
        self.versions = SideBySide(partition_count, settings.lease_seconds)
        self.owner = f"{process_identity()}|{uuid.uuid4().hex[:8]}".replace(" ", "_")
        self.db = Database(settings)
        self.db.on_lost = on_lost
        self.db.writer = self.owner
        self.db.prepared = fn.prepared()
        self.listener = Listener(self.db, self.owner)
        self.partitions: HubPartitions | None = None
        self.membership: Membership | None = None
        self._taken = False  # a partition was taken: the next poll sweeps at once, in full
        self._handed: set[int] = set()  # work ids given to this process's engine
        self._touched: dict[str, float] = {}  # instance id -> when this process last wrote it
        self._next_sweep = 0.0
        self._unhanded: set[int] = set()  # work ids the last sweep found nobody had
        super().__init__()

    @property
    def round_trips(self) -> int:
        return self.db.round_trips

    # --- lifecycle ----------------------------------------------------------------------

    async def open(self) -> None:
        conn = await self.db.connect()
        try:
            found = await migrate(conn, self.settings.schema)
            await fn.install(conn, self.settings.schema)
        except SchemaTooNewError as exc:
            raise StoreError(f"{self.settings.describe()}: {exc}") from None
        except Exception as exc:  # noqa: BLE001 - as the port's error, without the password
            raise self.db.failed("could not create the task hub's schema", exc) from None
        finally:
            await conn.close()
        if found == 0:
            log.info(
                "created task hub schema %s on %s", self.settings.schema, self.settings.describe()
            )
        await self.db.open_pool()
        if self.read_only:
            return
        partitions = HubPartitions(
            self.db, self.partition_count, self.owner, on_change=self._ownership_changed
        )
        await partitions.prepare()
        self.partitions = partitions
        self.db.fencer = partitions
        match = self.policy.match
        self.membership = Membership(
            partitions,
            Member(
                self.owner,
                self.version,
                extra={} if match == MatchStrategy.NONE else {"match": str(match)},
            ),
            self.settings.lease_seconds / 3,
            parked=lambda: self.versions.parked(partitions.held()),
            silence=self.settings.silence_seconds,
        )
        membership = self.membership
        self.versions.others_live = lambda: any(m.id != self.owner for m in membership.last_members)
        await self.membership.join()
        log.info(
            "joined task hub %s on %s: partitions %s of %d held",
            self.settings.hub,
            self.settings.describe(),
            sorted(partitions.held()) or "none",
            self.partition_count,
        )

    def serve_versions(self, parking: Parking, activities: set[str]) -> None:
        """Before ``open``: the engine's instances left untouched for their version and the
        activities this app defines (``versions``)."""
        self.versions.serve(parking, activities)

    def _ownership_changed(self) -> None:
        self._taken = True
        self._records.clear()
        if self.partitions is not None:
            self.versions.drop_lost(self.partitions.held())

    def _owns(self, instance_id: str) -> bool:
        return self.partitions is None or self.partitions.owns(instance_id)

    def _owned(self, instance_ids: list[str]) -> list[str]:
        partitions = self.partitions
        if partitions is None:
            return instance_ids  # read-only: the whole hub
        return [i for i in instance_ids if partitions.owns(i)]

    def owned_partitions(self) -> dict[str, Any]:
        """This host's part of the hub, for ``/admin/host/status``."""
        partitions = self.partitions
        if partitions is None:
            return {"count": self.partition_count, "held": [], "epochs": {}}
        return {
            "count": self.partition_count,
            "held": sorted(partitions.held()),
            "epochs": {str(u): e for u, e in sorted(partitions.epochs().items())},
            "host": self.owner,
        }

    async def hub_backlog(self, now: str) -> dict[str, Any]:
        """The whole hub's waiting work and its hosts (``backlog``)."""
        return await hub_backlog(self.db, self.partitions, self.partition_count, now, CLAIMABLE)

    async def close(self) -> None:
        if self.membership is not None:
            await self.membership.leave()
            self.membership = None
        await self.listener.close()
        await self.db.close()

    def _touch(self, instance_id: str) -> None:
        self._touched[instance_id] = time.monotonic()

    # --- instances ----------------------------------------------------------------------

    async def create_instance(
        self,
        record: InstanceRecord,
        start_message: dict[str, Any],
        overridable: tuple[str, ...],
        visible_at: str | None = None,
        *,
        count_first: bool = False,
    ) -> int | None:
        """One call of the start function (``functions``): the status check, the row, the
        start message (and its NOTIFY when another host owns the instance) and, with
        ``count_first`` on an instance this host owns, the first attempt's count."""
        instance_id = record.instance_id
        owned = self.partitions is not None and self.partitions.owns(instance_id)
        counted = count_first and self._owns(instance_id)

        async def body(conn: Conn, fence: tuple[int, int] | None) -> tuple[int, fn.StartOutcome]:
            cur = await conn.execute(
                fn.start_call(),
                fn.packed(
                    (
                        instance_id,
                        record.name,
                        record.status,
                        record.execution_id,
                        record.version,
                        record.input_json,
                        record.created_at,
                        record.updated_at,
                        record.parent_instance_id,
                        list(overridable),
                        codec.encode(start_message),
                        visible_at,
                        counted,
                        self.settings.channel,
                        None if owned else self.listener.payload(instance_id),
                    )
                ),
            )
            row = await cur.fetchone()
            assert row is not None
            answer = fn.StartOutcome(row)
            if answer.outcome == "exists":
                raise InstanceExistsError(instance_id, answer.found_status or "")
            return answer.xid, answer

        self._records.pop(instance_id, None)
        answer = await self.db.call_begun("create_instance", body)
        self._keep(instance_id, answer.record)
        self._touch(instance_id)
        # Another host owns the instance: its episode reads and counts.
        return answer.inbox_id if counted else None

    async def _message(
        self, conn: Conn, instance_id: str, message: dict[str, Any], visible_at: str | None
    ) -> int:
        """Append one message and, when another host owns its instance (or this store holds
        no partition), NOTIFY the hub's listeners (delivered at COMMIT), in one statement;
        the message's inbox id. This host's own engine is told by the caller, and a
        notifying transaction's commit is serialized with every other's."""
        elsewhere = self.partitions is None or not self.partitions.owns(instance_id)
        cur = await self.db.execute(
            conn,
            "INSERT INTO inbox (instance_id, message, visible_at) VALUES (%s, %s, %s)"
            + (" RETURNING id, pg_notify(%s, %s)" if elsewhere else " RETURNING id"),
            (instance_id, codec.encode(message), visible_at)
            + ((self.settings.channel, self.listener.payload(instance_id)) if elsewhere else ()),
        )
        row = await cur.fetchone()
        assert row is not None
        self._records.pop(instance_id, None)
        return int(row[0])

    async def send(
        self, instance_id: str, message: dict[str, Any], now: str, status: str | None = None
    ) -> None:
        async def body(conn: Conn) -> None:
            await self._message(conn, instance_id, message, None)
            if status is not None:
                await self.db.execute(
                    conn,
                    "UPDATE instances SET status = %s, updated_at = %s WHERE instance_id = %s",
                    (status, now, instance_id),
                )

        await self.db.write("send", body)

    async def get_instance(self, instance_id: str) -> InstanceRecord | None:
        async def read(conn: Conn) -> InstanceRecord | None:
            cur = await self.db.execute(
                conn,
                f"SELECT {COLUMNS} FROM instances WHERE instance_id = %s",
                (instance_id,),
            )
            row = await cur.fetchone()
            return instance_record(row) if row else None

        return await self.db.read(read)

    async def get_history(self, instance_id: str) -> list[dict[str, Any]]:
        async def read(conn: Conn) -> list[tuple[int, str]]:
            cur = await self.db.execute(
                conn,
                "SELECT seq, event FROM history WHERE instance_id = %s ORDER BY seq",
                (instance_id,),
            )
            return [(r[0], r[1]) for r in await cur.fetchall()]

        rows = await self.db.read(read)
        return [codec.decode_event(instance_id, seq, text) for seq, text in rows]

    async def fetch_messages(
        self, instance_id: str, now: str, limit: int = 1000
    ) -> list[tuple[int, dict[str, Any]]]:
        async def read(conn: Conn) -> list[tuple[int, str]]:
            cur = await self.db.execute(
                conn,
                "SELECT id, message FROM inbox WHERE instance_id = %s"
                " AND (visible_at IS NULL OR visible_at <= %s) ORDER BY id LIMIT %s",
                (instance_id, now, limit),
            )
            return [(int(r[0]), r[1]) for r in await cur.fetchall()]

        self._touch(instance_id)
        return [(i, codec.decode_message(text)) for i, text in await self.db.read(read)]

    # --- commits ------------------------------------------------------------------------

    async def commit_entity(self, commit: EntityCommit) -> None:
        db = self.db

        targets = [t for t, _ in commit.responses]

        async def body(conn: Conn, fence: tuple[int, int] | None) -> tuple[int | None, None]:
            # One call (functions.py): the fence, the consumed messages, the count, the
            # entity's row and its responses, NOTIFYing only the targets another host owns
            # (``sql.insert_messages``), as they are when the call is sent.
            fencer = db.fencer
            notify = sorted({t for t in targets if fencer is None or not fencer.owns(t)})
            unit, epoch = fence if fence is not None else (None, None)
            args = (
                unit,
                epoch,
                commit.instance_id,
                list(commit.consumed),
                codec.entity_name(commit.instance_id),
                RuntimeStatus.RUNNING,
                commit.now,
                commit.state_json,
                commit.exists,
                targets,
                [codec.encode(m) for _, m in commit.responses],
                db.settings.channel,
                db.writer,
                notify,
            )
            cur = await conn.execute(fn.entity_call(), fn.packed(args))
            row = await cur.fetchone()
            assert row is not None
            return (None if row[1] == "lost" else int(row[0])), None

        self._records.pop(commit.instance_id, None)
        await db.call_begun("commit_entity", body, fence=commit.instance_id)
        self._touch(commit.instance_id)

    # --- activities ---------------------------------------------------------------------

    async def complete_activity(
        self, work_id: int, instance_id: str, message: dict[str, Any], now: str
    ) -> bool:
        async def body(conn: Conn) -> bool:
            done = Completion(work_id, message, consumed=False)
            return await q.complete_work(self.db, conn, instance_id, done)

        completed = await self.db.write("complete_activity", body)
        self._handed.discard(work_id)
        return completed

    async def pending_activities(self) -> list[ActivityWork]:
        async def read(conn: Conn) -> list[ActivityWork]:
            cur = await self.db.execute(
                conn,
                "SELECT id, instance_id, execution_id, task_id, name, input, dequeue_count"
                f" FROM activities WHERE {CLAIMABLE} ORDER BY id",
                {"me": self.owner},
            )
            return [ActivityWork(*r) for r in await cur.fetchall()]

        works = self.versions.ours(await self.db.read(read))
        self._handed.update(w.work_id for w in works)
        return works

    async def mark_activity_dequeued(self, work_id: int) -> int:
        async def body(conn: Conn) -> int:
            # SKIP LOCKED: of two hosts claiming one item at once, the second gets 0 at
            # once (it runs on the first) instead of waiting for the first's commit.
            cur = await self.db.execute(
                conn,
                "UPDATE activities SET dequeue_count = dequeue_count + 1, claimed_by = %(me)s"
                " WHERE id = (SELECT id FROM activities WHERE id = %(id)s AND"
                f" {CLAIMABLE} FOR UPDATE SKIP LOCKED) RETURNING dequeue_count",
                {"me": self.owner, "id": work_id},
            )
            row = await cur.fetchone()
            return int(row[0]) if row else 0

        return await self.db.write("mark_activity_dequeued", body)

    async def release_activity(self, work_id: int) -> None:
        """Undo one dequeue: the run was abandoned by a graceful stop, it did not crash."""

        async def body(conn: Conn) -> None:
            await self.db.execute(
                conn,
                "UPDATE activities SET dequeue_count = GREATEST(dequeue_count - 1, 0),"
                " claimed_by = NULL WHERE id = %s",
                (work_id,),
            )

        await self.db.write("release_activity", body)

    async def begin_attempt(self, instance_id: str) -> int:
        """Count one more attempt at the instance's next episode; committing resets it."""

        async def body(conn: Conn, fence: tuple[int, int] | None) -> tuple[int | None, int]:
            # One call (functions.py): the fence, an asynchronous commit, the count.
            unit, epoch = fence if fence is not None else (None, None)
            cur = await conn.execute(fn.attempt_call(), fn.packed((unit, epoch, instance_id)))
            row = await cur.fetchone()
            assert row is not None
            xid, outcome, attempts = row
            return (None if outcome == "lost" else int(xid)), int(attempts or 0)

        return await self.db.call_begun("begin_attempt", body, fence=instance_id)

    async def release_attempt(self, instance_id: str) -> None:
        """Undo one count: the attempt a commit counted in advance never began (a stop)."""

        async def body(conn: Conn) -> None:
            await self.db.execute(
                conn,
                "UPDATE attempts SET count = GREATEST(count - 1, 0) WHERE instance_id = %s",
                (instance_id,),
            )

        await self.db.write("release_attempt", body)

    # --- scans --------------------------------------------------------------------------

    async def ready_instances(self, now: str, due_only: bool = False) -> list[str]:
        """Instances with visible messages (``due_only``: only those with due timers), the
        one whose oldest visible message is oldest first."""
        where = "visible_at <= %s" if due_only else "(visible_at IS NULL OR visible_at <= %s)"

        async def read(conn: Conn) -> list[str]:
            cur = await self.db.execute(
                conn,
                f"SELECT instance_id FROM inbox WHERE {where}"
                " GROUP BY instance_id ORDER BY MIN(id)",
                (now,),
            )
            return [r[0] for r in await cur.fetchall()]

        return self._owned(await self.db.read(read))

    async def next_due(self, now: str) -> str | None:
        async def read(conn: Conn) -> str | None:
            cur = await self.db.execute(
                conn, "SELECT MIN(visible_at) FROM inbox WHERE visible_at > %s", (now,)
            )
            row = await cur.fetchone()
            return row[0] if row else None

        return await self.db.read(read)

    async def poll(self) -> tuple[list[str], list[ActivityWork]]:
        """Wait for a NOTIFY of another writer or the next sweep; never raises."""
        try:
            # At most a second at a time: a partition taken meanwhile (``_taken``) is swept
            # within a second, not at the next sweep.
            wait = 0.0 if self._taken else min(1.0, max(0.0, self._next_sweep - time.monotonic()))
            heard = await self.listener.wait(wait)
            for instance_id in heard:  # another process wrote it: its kept row may be old
                self._records.pop(instance_id, None)
            woken = self._owned(heard)
            if time.monotonic() < self._next_sweep and not self._taken:
                return woken, []
            self._next_sweep = time.monotonic() + SWEEP_SECONDS
            return await self._sweep(woken)
        except Exception as exc:  # noqa: BLE001 - poll never raises: the loop goes on
            log.debug("poll failed: %s", exc)
            await asyncio.sleep(1.0)
            return [], []

    async def _sweep(self, woken: list[str]) -> tuple[list[str], list[ActivityWork]]:
        now = codec_now()
        stale = time.monotonic() - STALE_SECONDS
        if self._taken:  # a partition taken: everything of it waiting is this host's now
            self._taken = False
            stale = float("inf")
        ready = await self.ready_instances(now)
        found = list(woken) + [
            i for i in ready if i not in woken and self._touched.get(i, 0.0) < stale
        ]
        for instance_id in [i for i, t in self._touched.items() if t < stale]:
            del self._touched[instance_id]  # bounded: only recent instances are kept

        async def read(conn: Conn) -> list[tuple[ActivityWork, bool]]:
            cur = await self.db.execute(
                conn,
                "SELECT id, instance_id, execution_id, task_id, name, input, dequeue_count,"
                " claimed_by IS NOT NULL AND claimed_by <> %(me)s"
                f" FROM activities WHERE NOT (id = ANY(%(handed)s)) AND {CLAIMABLE}"
                " ORDER BY id LIMIT 1000",
                {"handed": sorted(self._handed), "me": self.owner},
            )
            return [(ActivityWork(*r[:7]), bool(r[7])) for r in await cur.fetchall()]

        # A work item committed a moment ago may not be in ``_handed`` yet (its commit's
        # caller resumes after the COMMIT): only one that two sweeps in a row found
        # unhanded was left behind - unless a host that is gone claimed it, which no
        # commit of this process is about to hand over.
        rows = [
            (w, orphan)
            for w, orphan in await self.db.read(read)
            if w.work_id not in self._handed and not self.versions.leaves(w.name)
        ]
        unhanded = [w for w, _ in rows]
        works = [w for w, orphan in rows if orphan or w.work_id in self._unhanded]
        self._unhanded = {w.work_id for w in unhanded} - {w.work_id for w in works}
        self._handed.update(w.work_id for w in works)
        return found, works

    # --- queries and purge --------------------------------------------------------------

    async def query(self, query: Query) -> QueryPage:
        where, args = instance_filters(query, POSTGRES)
        limit = query.top if query.top and query.top > 0 else None

        async def read(conn: Conn) -> QueryPage:
            cur = await self.db.execute(
                conn,
                f"SELECT {COLUMNS} FROM instances WHERE {where} ORDER BY instance_id LIMIT %s",
                (*args, limit),
            )
            records = [instance_record(r) for r in await cur.fetchall()]
            full = limit is not None and len(records) == limit
            return QueryPage(records, records[-1].instance_id if full else None)

        return await self.db.read(read)

    async def purge(self, instance_id: str) -> int:
        self._records.pop(instance_id, None)

        async def body(conn: Conn) -> int:
            return await q.purge_ids(self.db, conn, [instance_id])

        return await self.db.write("purge", body)

    async def purge_many(self, query: Query) -> int:
        """Purge the terminal instances ``query`` matches; running ones are never purged."""
        terminal = codec.purgeable(query)
        if terminal is None:
            return 0
        where, args = instance_filters(terminal, POSTGRES)
        self._records.clear()

        async def body(conn: Conn) -> int:
            cur = await self.db.execute(
                conn,
                f"SELECT instance_id FROM instances WHERE {where} FOR UPDATE",
                args,
            )
            ids = [r[0] for r in await cur.fetchall()]
            return await q.purge_ids(self.db, conn, ids)

        return await self.db.write("purge_many", body)

    # --- host secrets and timer-trigger schedules: compare-and-swap of named texts ------

    async def get_secret(self, name: str) -> str | None:
        return await self._get_named("host_secrets", name)

    async def swap_secret(self, name: str, expected: str | None, value: str) -> bool:
        # Unfenced: a tool beside the host (read-only: no lease) must be able to change keys.
        return await self._swap_named("host_secrets", name, expected, value)

    async def get_schedule(self, name: str) -> str | None:
        return await self._get_named("schedules", name)

    async def swap_schedule(self, name: str, expected: str | None, value: str) -> bool:
        # Any host's: the compare-and-swap alone makes one claim of an occurrence win.
        return await self._swap_named("schedules", name, expected, value)

    async def _get_named(self, table: str, name: str) -> str | None:
        async def read(conn: Conn) -> str | None:
            cur = await self.db.execute(
                conn,
                f"SELECT value FROM {table} WHERE name = %s",
                (name,),
            )
            row = await cur.fetchone()
            return None if row is None else str(row[0])

        return await self.db.read(read)

    async def _swap_named(self, table: str, name: str, expected: str | None, value: str) -> bool:
        async def body(conn: Conn) -> bool:
            if expected is None:
                cur = await self.db.execute(
                    conn,
                    f"INSERT INTO {table} (name, value) VALUES (%s, %s)"
                    " ON CONFLICT (name) DO NOTHING RETURNING 1",
                    (name, value),
                )
            else:
                cur = await self.db.execute(
                    conn,
                    f"UPDATE {table} SET value = %s WHERE name = %s AND value = %s RETURNING 1",
                    (value, name, expected),
                )
            return await cur.fetchone() is not None

        # Not an episode: no ``store.before_commit`` fault point (crash tests count episodes).
        return await self.db.write(f"swap {table}", body, fault=False)


def codec_now() -> str:
    """Now in the host's timestamp format (as the engine passes ``now``)."""
    return h.format_time(datetime.now(UTC))
