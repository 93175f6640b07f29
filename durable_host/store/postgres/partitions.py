"""Partitions of a task hub that several hosts share on PostgreSQL: leases, epochs,
heartbeats and the write fence.

Tables of the hub's schema (``schema``, version 2):

* ``meta`` key ``partition_count`` - written once by the first host; a host opened with
  another count is refused (``PartitionCountError`` names both).
* ``partitions (unit, owner, epoch, expires_at)`` - one row per partition. ``acquire``
  locks the row ``FOR UPDATE`` and takes it when it is free, expired by the server's clock
  (hosts' clocks never matter) or held by a dead process of this machine (a SIGKILLed host
  restarted takes its partitions back at once); the epoch grows by one with every
  acquisition. ``renew_all`` pushes every held row's expiry in one statement; a row that
  comes back with another epoch, or not at all, is lost.
* ``hosts (id, version, draining, extra, expires_at)`` - heartbeats; ``expires_at``, new
  at every beat, is the token ``ownership.Silence`` watches. ``evict`` frees a silent
  holder's partition and expires its heartbeat.

``HubPartitions`` is the ``membership.Backend`` of the PostgreSQL store and its fence:
``check(instance_id)`` names the partition and epoch an owner write must lock
(``Database._fence``: ``FOR KEY SHARE`` on the row with this epoch; a takeover's
``FOR UPDATE`` waits for the commits in flight, and every later commit of the old owner
finds no row: ``UnitLostError``, nothing written).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable

from durable_host.cluster.ownership import Member, partition_of
from durable_host.store.azure.lease import is_dead_process_here
from durable_host.store.base import StoreError, UnitLostError
from durable_host.store.postgres.database import Conn, Database

log = logging.getLogger("durable_host.store.postgres")


class PartitionCountError(StoreError):
    """The hub was created with another partition count than this host's."""


class HubPartitions:
    """Partition leases, heartbeats and the write fence of one host (module docstring)."""

    def __init__(
        self,
        db: Database,
        count: int,
        owner: str,
        *,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self.db = db
        self.count = count
        self.owner = owner
        self.units = list(range(count))
        self.on_change = on_change
        self._held: dict[int, int] = {}  # unit -> epoch
        self._acquired_at: dict[int, float] = {}  # unit -> monotonic time it was taken

    @property
    def seconds(self) -> int:
        return self.db.settings.lease_seconds

    async def prepare(self) -> None:
        """Check (or write) the hub's partition count; create the partition rows."""

        async def body(conn: Conn) -> str:
            await self.db.execute(
                conn,
                "INSERT INTO meta (key, value) VALUES ('partition_count', %s)"
                " ON CONFLICT (key) DO NOTHING",
                (str(self.count),),
            )
            cur = await self.db.execute(
                conn, "SELECT value FROM meta WHERE key = 'partition_count'"
            )
            row = await cur.fetchone()
            assert row is not None
            await self.db.execute(
                conn,
                "INSERT INTO partitions (unit, owner, epoch, expires_at)"
                " SELECT u, NULL, 0, '-infinity' FROM generate_series(0, %s - 1) AS u"
                " ON CONFLICT (unit) DO NOTHING",
                (int(row[0]),),
            )
            return str(row[0])

        stored = await self.db.write("prepare partitions", body, fault=False)
        if int(stored) != self.count:
            hub = self.db.settings.hub
            raise PartitionCountError(
                f"task hub {hub} was created with partitionCount {stored} and this host has"
                f" partitionCount {self.count}: a hub's partition count cannot change (set"
                f" extensions.durableTask.storageProvider.partitionCount to {stored}, or use"
                " a new hub)"
            )

    # --- the membership backend --------------------------------------------------------

    def held(self) -> set[int]:
        return set(self._held)

    def epochs(self) -> dict[int, int]:
        return dict(self._held)

    async def beat(self, me: Member, ttl: float) -> None:
        async def body(conn: Conn) -> None:
            await self.db.execute(
                conn,
                "INSERT INTO hosts (id, version, draining, extra, expires_at)"
                " VALUES (%s, %s, %s, %s, clock_timestamp() + make_interval(secs => %s))"
                " ON CONFLICT (id) DO UPDATE SET version = excluded.version,"
                " draining = excluded.draining, extra = excluded.extra,"
                " expires_at = excluded.expires_at",
                (me.id, me.version, me.draining, json.dumps(dict(me.extra)), ttl),
            )
            # Heartbeats of hosts gone for an hour: nobody reads them any more.
            await self.db.execute(
                conn,
                "DELETE FROM hosts WHERE expires_at < clock_timestamp() - interval '1 hour'",
            )

        await self.db.write("heartbeat", body, fault=False)

    async def forget(self, me: Member) -> None:
        async def body(conn: Conn) -> None:
            await self.db.execute(conn, "DELETE FROM hosts WHERE id = %s", (me.id,))

        await self.db.write("forget heartbeat", body, fault=False)

    async def members(self) -> list[Member]:
        """Live heartbeats; a dead process of this machine is no member (a restart)."""

        async def read(conn: Conn) -> list[tuple[str, str, bool, str, str]]:
            cur = await self.db.execute(
                conn,
                "SELECT id, version, draining, extra, expires_at::text FROM hosts"
                " WHERE expires_at > clock_timestamp() ORDER BY id",
            )
            return [(r[0], r[1], bool(r[2]), r[3], r[4]) for r in await cur.fetchall()]

        found, dead = [], []
        for host, version, draining, extra, beat in await self.db.read(read):
            if host != self.owner and is_dead_process_here(host):
                dead.append(host)
                continue
            found.append(
                Member(host, version or "", draining, json.loads(extra or "{}"), beat=beat)
            )
        if dead:
            await self._bury(dead)
        return found

    async def _bury(self, dead: list[str]) -> None:
        """Remove the heartbeats of dead processes of this machine: their activity claims
        lapse at once (a restarted host runs its own work again without waiting)."""

        async def body(conn: Conn) -> None:
            await self.db.execute(conn, "DELETE FROM hosts WHERE id = ANY(%s)", (dead,))

        await self.db.write("remove dead heartbeats", body, fault=False)
        log.warning("heartbeats of dead processes on this machine removed: %s", dead)

    async def holdings(self) -> dict[int, str | None]:
        """Who holds which partition (None: free or expired)."""

        async def read(conn: Conn) -> list[tuple[int, str | None]]:
            cur = await self.db.execute(
                conn,
                "SELECT unit, CASE WHEN expires_at > clock_timestamp() THEN owner END"
                " FROM partitions ORDER BY unit",
            )
            return [(int(r[0]), r[1]) for r in await cur.fetchall()]

        found: dict[int, str | None] = dict.fromkeys(self.units)
        for unit, holder in await self.db.read(read):
            if unit in found:
                found[unit] = holder
        return found

    async def acquire(self, unit: int, holder: str | None) -> bool:
        """Take the partition and raise its epoch; False if a live host holds it."""
        if unit in self._held:
            return True

        async def body(conn: Conn) -> int | None:
            # FOR UPDATE, not the UPDATE's own lock: it conflicts with the fence's
            # FOR KEY SHARE, so the old owner's commits in flight finish first.
            cur = await self.db.execute(
                conn,
                "SELECT owner, expires_at < clock_timestamp() FROM partitions"
                " WHERE unit = %s FOR UPDATE",
                (unit,),
            )
            row = await cur.fetchone()
            if row is None:
                return None
            owner, expired = row[0], bool(row[1])
            if owner is not None and owner != self.owner and not expired:
                if not is_dead_process_here(str(owner)):
                    return None
                log.warning(
                    "partition %d was held by %s, a dead process on this machine: taken",
                    unit,
                    owner,
                )
            cur = await self.db.execute(
                conn,
                "UPDATE partitions SET owner = %s, epoch = epoch + 1,"
                " expires_at = clock_timestamp() + make_interval(secs => %s)"
                " WHERE unit = %s RETURNING epoch",
                (self.owner, self.seconds, unit),
            )
            taken = await cur.fetchone()
            assert taken is not None
            return int(taken[0])

        epoch = await self.db.write("acquire partition", body, fault=False)
        if epoch is None:
            return False
        self._held[unit] = epoch
        self._acquired_at[unit] = time.monotonic()
        log.info("partition %d of %d: this host holds it as epoch %d", unit, self.count, epoch)
        self._changed()
        return True

    async def evict(self, unit: int, holder: str) -> bool:
        """Free a partition whose holder's heartbeat stopped, and expire that heartbeat, so
        its activity claims lapse too. The epoch stays: the next ``acquire`` raises it,
        and from then on every commit of the old holder finds no row to lock."""
        if holder == self.owner:
            return False

        async def body(conn: Conn) -> bool:
            cur = await self.db.execute(
                conn,
                "UPDATE partitions SET owner = NULL, expires_at = '-infinity'"
                " WHERE unit = %s AND owner = %s RETURNING unit",
                (unit, holder),
            )
            freed = await cur.fetchone()
            await self.db.execute(
                conn,
                "UPDATE hosts SET expires_at = clock_timestamp() WHERE id = %s",
                (holder,),
            )
            return freed is not None

        return bool(await self.db.write("evict partition", body, fault=False))

    def wanted(self) -> dict[int, str]:
        """Partitions handed over for a version: none here (versions side by side are the
        Azure store's for now; the store passes no ``parked`` to ``Membership``)."""
        return {}

    def held_for(self) -> dict[int, float]:
        """Seconds since this host took each partition it holds."""
        now = time.monotonic()
        return {u: now - t for u, t in self._acquired_at.items() if u in self._held}

    async def hand_over(self, unit: int, version: str) -> None:
        """Not reached without ``parked`` (see ``wanted``): a plain release."""
        await self.release(unit)

    async def renew_all(self) -> None:
        if not self._held:
            return
        held = dict(self._held)

        async def body(conn: Conn) -> dict[int, int]:
            cur = await self.db.execute(
                conn,
                "UPDATE partitions SET expires_at = clock_timestamp() + make_interval(secs => %s)"
                " WHERE unit = ANY(%s) AND owner = %s RETURNING unit, epoch",
                (self.seconds, sorted(held), self.owner),
            )
            return {int(r[0]): int(r[1]) for r in await cur.fetchall()}

        renewed = await self.db.write("renew partitions", body, fault=False)
        for unit, epoch in held.items():
            if renewed.get(unit) != epoch:
                self.lose(unit, "another host took it over (its lease had lapsed)")

    async def release(self, unit: int) -> None:
        epoch = self._held.pop(unit, None)
        if epoch is None:
            return
        self._changed()

        async def body(conn: Conn) -> None:
            await self.db.execute(
                conn,
                "UPDATE partitions SET owner = NULL, expires_at = '-infinity'"
                " WHERE unit = %s AND epoch = %s AND owner = %s",
                (unit, epoch, self.owner),
            )

        try:
            await self.db.write("release partition", body, fault=False)
        except StoreError as exc:
            log.warning("partition %d: release failed, its lease lapses: %s", unit, exc)

    def lose(self, unit: int, why: str) -> None:
        if self._held.pop(unit, None) is None:
            return
        log.warning("partition %d lost: %s; this host stops writing to it", unit, why)
        self._changed()

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    # --- the fence ---------------------------------------------------------------------

    def unit_of(self, instance_id: str) -> int:
        return partition_of(instance_id, self.count)

    def owns(self, instance_id: str) -> bool:
        return self.unit_of(instance_id) in self._held

    def check(self, instance_id: str) -> tuple[int, int]:
        """The partition and epoch an owner write of ``instance_id`` must lock."""
        unit = self.unit_of(instance_id)
        epoch = self._held.get(unit)
        if epoch is None:
            raise UnitLostError(f"this host does not own partition {unit} (instance {instance_id})")
        return unit, epoch
