"""``AzureStore``: the Store port (``store/base.py``) on Azure Storage tables and blobs.

It wires the parts of the package together and is their one public face; every public
method translates Azure SDK errors into the store's own (``errors``).

* ``tables``    requests, with retries, the ownership fence and large texts in blobs;
* ``partitions`` ownership: the hub's partition count, one lease and epoch per partition,
                heartbeats, and the fence of every owner's write; ``membership`` (the
                host's) balances the partitions among the hosts;
* ``rows``      building and decoding rows; ``codec`` their keys and the head row;
* ``commit``    the commit protocol and the visibility of staged rows;
* ``instances`` create, send, read, commit an episode or an entity batch;
* ``work``      activity work items; ``attempts`` attempts at the next episode;
* ``index``     hints of live instances and timers in a small table of their own;
* ``discovery`` ready instances, due timers, pending work and ``poll``, through the index;
* ``queries``   instance queries and purges.

Settings: ``partition_count`` (host.json ``storageProvider.partitionCount``),
``version`` and ``policy`` (the app's ``defaultVersion`` and version policy, announced in
the heartbeat), ``parking`` (the engine's instances left untouched for their version: the
partitions holding some are handed to a host of their version, ``docs/versioning.md``),
``lease_seconds`` and ``silence_seconds`` (``DURABLE_HOST_LEASE_SECONDS``, 15-60, default
15, and ``DURABLE_HOST_SILENCE_SECONDS``, 1-60, default a third of the lease, read and
checked by the host: ``membership``),
``DURABLE_HOST_AZURE_RETRY_SECONDS`` (default 60). Tests: ``DURABLE_HOST_AZURE_FAULTS``
loses chosen responses (``faults``), and the SIGKILL point ``store.before_commit`` of
``DURABLE_HOST_FAULTS`` fires before each operation's final write (for a commit: after
staging, before the commit point), as in SQLite.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from azure.core.exceptions import AzureError

from durable_host.cluster.membership import Membership
from durable_host.cluster.ownership import DEFAULT_PARTITIONS, Member, partition_of
from durable_host.core.records import (
    ActivityWork,
    Completion,
    EntityCommit,
    Episode,
    InstanceRecord,
    Query,
    QueryPage,
)
from durable_host.core.versioning import MatchStrategy, Parking, VersionPolicy
from durable_host.ops import azurite
from durable_host.store.azure.attempts import EpisodeAttempts
from durable_host.store.azure.codec import instance_id_of, item_id
from durable_host.store.azure.commit import CommitProtocol
from durable_host.store.azure.discovery import Discovery
from durable_host.store.azure.errors import StoreUnavailableError, translate_azure_errors
from durable_host.store.azure.index import HubIndex
from durable_host.store.azure.instances import Instances
from durable_host.store.azure.lease import process_identity
from durable_host.store.azure.partitions import HubPartitions, PartitionCountError
from durable_host.store.azure.queries import HubScans
from durable_host.store.azure.rows import HubRows
from durable_host.store.azure.schedules import HubSchedules
from durable_host.store.azure.secrets import HubSecrets
from durable_host.store.azure.tables import HubTables
from durable_host.store.azure.work import WorkItems
from functions_connections import ConnectionSettingError, StorageConnection

log = logging.getLogger("durable_host.store.azure")
# The SDK logs every request and response at INFO; the host's own log would drown in them.
logging.getLogger("azure.core.pipeline.policies.http_logging_policy").setLevel(logging.WARNING)
# A step's work-item deletions share the commit-point transaction (100 operations) with
# the head, the attempts row and, in the one-transaction shape, a history row and an inbox
# deletion or two per result: beyond about 45 results the commit would take the staged
# shape, which rewrites the whole history.
MAX_STEP_COMPLETIONS = 40


class AzureStore:
    """Store port on Azure Storage tables and blobs (``docs/azure-storage.md``)."""

    def __init__(
        self,
        connection: str | StorageConnection,  # a connection string or identity-based
        hub: str,
        *,
        azurite_location: Path | None = None,
        on_lost: Callable[[str], None] | None = None,
        lease_seconds: int | None = None,
        retry_seconds: float | None = None,
        read_only: bool = False,
        partition_count: int = DEFAULT_PARTITIONS,
        version: str = "",
        policy: VersionPolicy | None = None,
        silence_seconds: float | None = None,
    ) -> None:
        """``read_only``: inspect a hub without taking a partition (tools, tests); writes
        fail, discovery reports the whole hub."""
        self.connection = connection
        self.read_only = read_only
        self.hub = hub
        self.table_name = f"{hub}HostState"
        self.container_name = f"{hub.lower()}-hoststate"
        self.azurite_location = azurite_location
        self.lease_seconds = lease_seconds or int(
            os.environ.get("DURABLE_HOST_LEASE_SECONDS", "15")
        )
        self.silence_seconds = silence_seconds or self.lease_seconds / 3
        self.retry_seconds = retry_seconds or float(
            os.environ.get("DURABLE_HOST_AZURE_RETRY_SECONDS", "60")
        )
        self._on_lost = on_lost  # kept for the port's shape: a partition lost is no stop
        self.partition_count = partition_count
        self.version = version
        self.policy = policy or VersionPolicy()
        self.parking: Parking | None = None  # set by the engine's owner before ``open``
        self._held_before: set[int] = set()  # partitions held at the last change
        self.partitions: HubPartitions | None = None
        self.membership: Membership | None = None
        self._joined = False  # partitions taken at open: the engine's start looks at them
        self._azurite: azurite.Azurite | None = None
        self.tables = HubTables(
            retry_seconds=self.retry_seconds,
            writer=f"{process_identity()}|{uuid.uuid4().hex[:8]}",
        )
        rows = HubRows(self.tables)
        self.attempts = EpisodeAttempts(self.tables)
        self.index = HubIndex(self.tables)
        self.commits = CommitProtocol(self.tables, rows, self.index)
        self.work = WorkItems(self.tables, rows, self.commits)
        self.instances = Instances(self.tables, rows, self.commits, self.work, self.attempts)
        self.scans = HubScans(self.tables, rows, self.commits, self.work, self.attempts, self.index)
        self.discovery = Discovery(self.tables, self.commits, self.work, self.index)
        self.secrets = HubSecrets(self.tables)
        self.schedules = HubSchedules(self.tables)

    @property
    def round_trips(self) -> int:
        """Storage requests sent so far, for /admin/host/metrics and bench/."""
        return self.tables.round_trips

    # --- lifecycle ----------------------------------------------------------------------

    async def open(self) -> None:
        if self.azurite_location is not None and isinstance(self.connection, str):
            try:
                self._azurite = await asyncio.to_thread(
                    azurite.ensure, self.connection, self.azurite_location
                )
            except azurite.AzuriteError as exc:
                raise StoreUnavailableError(str(exc)) from exc
        connection = self.connection
        if isinstance(connection, str):
            connection = azurite.resolve_setting(connection)
        try:
            self.tables.connect(connection, self.table_name, self.container_name)
        except ConnectionSettingError as exc:
            raise StoreUnavailableError(str(exc)) from exc
        if self.read_only:
            return
        await self.tables.create()
        partitions = HubPartitions(
            self.tables.container,
            self.partition_count,
            self.lease_seconds,
            self.tables.writer,
            on_change=self._ownership_changed,
        )
        self.partitions = partitions
        self.index.trusts = partitions.owns
        try:
            await partitions.prepare(self.hub)
            self.tables.fence = partitions
            await self.index.build()
            match = self.policy.match
            extra = {} if match == MatchStrategy.NONE else {"match": str(match)}
            self.membership = Membership(
                partitions,
                Member(self.tables.writer, self.version, extra=extra),
                self.lease_seconds / 3,
                parked=self._parked,
                silence=self.silence_seconds,
            )
            self.work.is_live = self._is_live
            self.work.is_dead = self.membership.is_dead
            self.work.store_now = partitions.store_now
            await self.membership.join()
            self._joined = True  # from now on a partition taken is looked at by ``poll``
        except PartitionCountError:
            raise
        except AzureError as exc:
            raise StoreUnavailableError(f"could not join the task hub: {exc}") from exc
        log.info(
            "joined task hub %s on table %s: partitions %s of %d held",
            self.hub,
            self.table_name,
            sorted(partitions.held()) or "none",
            self.partition_count,
        )

    @translate_azure_errors
    async def hub_backlog(self, now: str) -> dict[str, Any]:
        """The whole hub's waiting work and its hosts, for the scale signal and
        ``next-wake``: per partition the visible messages and the oldest one's inbox id,
        the activity work items nobody runs and the oldest one's id, and the live hosts
        with the partitions each holds."""
        surveys = await self.discovery.backlog(now)
        count = self.partition_count
        per: dict[int, list[int]] = {u: [] for u in range(count)}
        work: list[int] = []
        for found in surveys:
            unit = partition_of(instance_id_of(found.partition), count)
            per[unit] += [item_id(r["RowKey"]) for r in found.visible]
            work += [item_id(r["RowKey"]) for r in found.work if not self.work.claimed_elsewhere(r)]
        hosts: list[dict[str, Any]] = []
        holdings: dict[int, str | None] = {}
        if self.partitions is not None:
            holdings = await self.partitions.holdings()
            for member in await self.partitions.members():
                held = sorted(u for u, holder in holdings.items() if holder == member.id)
                hosts.append(
                    {
                        "id": member.id,
                        "version": member.version,
                        "draining": member.draining,
                        "partitions": held,
                        "self": member.id == self.tables.writer,
                    }
                )
        return {
            "partitions": [
                {
                    "partition": u,
                    "owner": holdings.get(u),
                    "backlog": len(ids),
                    "oldest": min(ids) if ids else None,
                }
                for u, ids in sorted(per.items())
            ],
            "activities": {"backlog": len(work), "oldest": min(work) if work else None},
            "hosts": hosts,
        }

    def serve_versions(self, parking: Parking, activities: set[str]) -> None:
        """Before ``open``: the engine's instances left untouched for their version (their
        partitions are handed to a host of that version) and the activities this app
        defines (others are left to a host whose app does, while one is live)."""
        self.parking = parking
        names = {name.lower() for name in activities}

        def leaves(name: str) -> bool:
            membership = self.membership
            if name.lower() in names or membership is None:
                return False
            return any(m.id != self.tables.writer for m in membership.last_members)

        self.work.leaves = leaves

    def _parked(self) -> dict[int, list[str]]:
        """Per held partition, the versions of the instances this host left untouched
        there lately (``Parking.recent``)."""
        parking, partitions = self.parking, self.partitions
        if parking is None or partitions is None:
            return {}
        window = Parking.RECHECK_SECONDS + self.lease_seconds
        found: dict[int, list[str]] = {}
        for instance_id, version in parking.recent(time.monotonic(), window).items():
            unit = partition_of(instance_id, self.partition_count)
            if unit in partitions.held():
                found.setdefault(unit, []).append(version)
        return found

    def _is_live(self, host: str) -> bool:
        """A host of the hub whose heartbeat was fresh at the last balancing round."""
        membership = self.membership
        return membership is not None and any(m.id == host for m in membership.last_members)

    def _ownership_changed(self) -> None:
        """A partition was taken or given up: drop what this process remembers of
        instances it no longer owns, and look for the work of those it took."""
        if self.partitions is None:
            return
        self.commits.forget_heads()
        held = self.partitions.held()
        taken, self._held_before = held - self._held_before, held
        if taken:
            unit_of = self.partitions.unit_of
            self.index.distrust(lambda partition: unit_of(partition) in taken)
        if self.parking is not None:
            # Another host decides for the instances of a partition given up (and shows
            # its own versionBlock, if it must leave them too).
            for instance_id in self.parking.ids():
                if partition_of(instance_id, self.partition_count) not in held:
                    self.parking.release(instance_id)
        if self._joined:
            self.discovery.taken()

    def owned_partitions(self) -> dict[str, Any]:
        """This host's part of the hub, for ``/admin/host/status``."""
        partitions = self.partitions
        if partitions is None:
            return {"count": self.partition_count, "held": [], "epochs": {}}
        return {
            "count": self.partition_count,
            "held": sorted(partitions.held()),
            "epochs": {str(u): e for u, e in sorted(partitions.epochs().items())},
            "host": self.tables.writer,
        }

    async def close(self) -> None:
        if self.membership is not None:
            await self.membership.leave()
            self.membership = None
        await self.tables.close()
        if self._azurite is not None:
            await asyncio.to_thread(self._azurite.stop)
            self._azurite = None

    # --- instances ----------------------------------------------------------------------

    @translate_azure_errors
    async def create_instance(
        self,
        record: InstanceRecord,
        start_message: dict[str, Any],
        overridable: tuple[str, ...],
        visible_at: str | None = None,
        *,
        count_first: bool = False,
    ) -> int | None:
        await self.instances.create(record, start_message, overridable, visible_at)
        return None  # other hosts may take the instance: its episode reads and counts

    @translate_azure_errors
    async def send(
        self, instance_id: str, message: dict[str, Any], now: str, status: str | None = None
    ) -> None:
        """Add a message; with ``status``, set the runtime status in the same transaction."""
        await self.instances.send(instance_id, message, now, status)

    @translate_azure_errors
    async def get_instance(self, instance_id: str) -> InstanceRecord | None:
        # While other hosts share the hub, a start, rewind or purge made through one of
        # them rewrites a head this process may remember: status reads go to the table.
        return await self.instances.get(instance_id, remembered=self._alone())

    @translate_azure_errors
    async def episode_record(self, instance_id: str) -> InstanceRecord | None:
        # The owner's memory of the head it committed; the episode's commit is conditional
        # on that head's ETag, so a head another host rewrote meanwhile fails the commit.
        return await self.instances.get(instance_id)

    def _alone(self) -> bool:
        """No other live host on the hub at the last balancing round (or read-only)."""
        membership = self.membership
        if membership is None:
            return True
        return all(m.id == self.tables.writer for m in membership.last_members)

    @translate_azure_errors
    async def get_history(self, instance_id: str) -> list[dict[str, Any]]:
        return await self.instances.history(instance_id)

    @translate_azure_errors
    async def fetch_messages(
        self, instance_id: str, now: str, limit: int = 1000
    ) -> list[tuple[int, dict[str, Any]]]:
        return await self.instances.fetch_messages(instance_id, now, limit)

    @property
    def max_step_completions(self) -> int:
        """Work-item deletions join the commit-point transaction (100 operations at most)."""
        return MAX_STEP_COMPLETIONS

    @translate_azure_errors
    async def commit_episode(
        self, instance_id: str, episode: Episode, now: str, *, count_next: bool = False
    ) -> list[ActivityWork]:
        return await self.instances.commit_episode(instance_id, episode, now, count_next)

    @translate_azure_errors
    async def commit_step(
        self,
        instance_id: str,
        completions: list[Completion],
        episode: Episode,
        now: str,
        *,
        count_next: bool = False,
    ) -> list[ActivityWork] | None:
        return await self.instances.commit_step(instance_id, completions, episode, now, count_next)

    @translate_azure_errors
    async def commit_entity(self, commit: EntityCommit) -> None:
        await self.instances.commit_entity(commit)

    @translate_azure_errors
    async def begin_attempt(self, instance_id: str) -> int:
        """Count one more attempt at the instance's next episode; committing resets it."""
        return await self.attempts.begin(instance_id)

    @translate_azure_errors
    async def release_attempt(self, instance_id: str) -> None:
        """Undo one count: an attempt counted in advance that never began (a stop)."""
        await self.attempts.release(instance_id)

    # --- activities ---------------------------------------------------------------------

    @translate_azure_errors
    async def complete_activity(
        self, work_id: int, instance_id: str, message: dict[str, Any], now: str
    ) -> bool:
        return await self.work.complete(work_id, instance_id, message)

    @translate_azure_errors
    async def pending_activities(self) -> list[ActivityWork]:
        return await self.discovery.pending_activities()

    @translate_azure_errors
    async def mark_activity_dequeued(self, work_id: int) -> int:
        return await self.work.mark_dequeued(work_id)

    @translate_azure_errors
    async def release_activity(self, work_id: int) -> None:
        """Undo one dequeue: the run was abandoned by a graceful stop, it did not crash."""
        await self.work.release(work_id)

    # --- scans --------------------------------------------------------------------------

    @translate_azure_errors
    async def ready_instances(self, now: str, due_only: bool = False) -> list[str]:
        """Instances with visible messages (``due_only``: only those with due timers)."""
        return await self.discovery.ready_instances(now, due_only)

    @translate_azure_errors
    async def next_due(self, now: str) -> str | None:
        return await self.discovery.next_due(now)

    async def poll(self) -> tuple[list[str], list[ActivityWork]]:
        """Wait, then report work this process was not told about; never raises."""
        return await self.discovery.poll()

    @translate_azure_errors
    async def query(self, query: Query) -> QueryPage:
        return await self.scans.query(query)

    @translate_azure_errors
    async def purge(self, instance_id: str) -> int:
        return await self.scans.purge(instance_id)

    @translate_azure_errors
    async def purge_many(self, query: Query) -> int:
        return await self.scans.purge_many(query)

    # --- host secrets -------------------------------------------------------------------

    @translate_azure_errors
    async def get_secret(self, name: str) -> str | None:
        return await self.secrets.get(name)

    @translate_azure_errors
    async def swap_secret(self, name: str, expected: str | None, value: str) -> bool:
        """Compare-and-swap, unfenced: also works on a hub opened read-only (``secrets``)."""
        return await self.secrets.swap(name, expected, value)

    # --- timer-trigger schedules --------------------------------------------------------

    @translate_azure_errors
    async def get_schedule(self, name: str) -> str | None:
        return await self.schedules.get(name)

    @translate_azure_errors
    async def swap_schedule(self, name: str, expected: str | None, value: str) -> bool:
        """Compare-and-swap: the claim of one occurrence (``timer_triggers``)."""
        return await self.schedules.swap(name, expected, value)
