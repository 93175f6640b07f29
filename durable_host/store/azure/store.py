"""``AzureStore``: the Store port (``store/base.py``) on Azure Storage tables and blobs.

It wires the parts of the package together and is their one public face; every public
method translates Azure SDK errors into the store's own (``errors``).

* ``tables``    requests, with retries, the ownership fence and large texts in blobs;
* ``lease``     ownership of the hub (standby, takeover, epoch);
* ``rows``      building and decoding rows; ``codec`` their keys and the head row;
* ``commit``    the commit protocol and the visibility of staged rows;
* ``instances`` create, send, read, commit an episode or an entity batch;
* ``work``      activity work items; ``attempts`` attempts at the next episode;
* ``index``     hints of live instances and timers in a small table of their own;
* ``discovery`` ready instances, due timers, pending work and ``poll``, through the index;
* ``queries``   instance queries and purges.

Settings: ``DURABLE_HOST_LEASE_SECONDS`` (15-60, default 15),
``DURABLE_HOST_AZURE_RETRY_SECONDS`` (default 60). Tests: ``DURABLE_HOST_AZURE_FAULTS``
loses chosen responses (``faults``), and the SIGKILL point ``store.before_commit`` of
``DURABLE_HOST_FAULTS`` fires before each operation's final write (for a commit: after
staging, before the commit point), as in SQLite.
"""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from azure.core.exceptions import AzureError

from durable_host import azurite
from durable_host.records import (
    ActivityWork,
    Completion,
    EntityCommit,
    Episode,
    InstanceRecord,
    Query,
    QueryPage,
)
from durable_host.store.azure.attempts import EpisodeAttempts
from durable_host.store.azure.commit import CommitProtocol
from durable_host.store.azure.discovery import Discovery
from durable_host.store.azure.errors import StoreUnavailableError, translate_azure_errors
from durable_host.store.azure.index import HubIndex
from durable_host.store.azure.instances import Instances
from durable_host.store.azure.lease import HubLease, process_identity
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
    ) -> None:
        """``read_only``: inspect a hub without taking its lease (tools, tests); writes fail."""
        self.connection = connection
        self.read_only = read_only
        self.hub = hub
        self.table_name = f"{hub}HostState"
        self.container_name = f"{hub.lower()}-hoststate"
        self.azurite_location = azurite_location
        self.lease_seconds = lease_seconds or int(
            os.environ.get("DURABLE_HOST_LEASE_SECONDS", "15")
        )
        self.retry_seconds = retry_seconds or float(
            os.environ.get("DURABLE_HOST_AZURE_RETRY_SECONDS", "60")
        )
        self._on_lost = on_lost
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
        lease = HubLease(
            self.tables.container.get_blob_client("owner"),
            self.lease_seconds,
            self.tables.writer,
            self._on_lost,
        )
        self.tables.lease = lease
        try:
            await lease.acquire(self.hub)
        except AzureError as exc:
            raise StoreUnavailableError(f"could not take the task hub lease: {exc}") from exc
        log.info(
            "owner of task hub %s (epoch %d) on table %s", self.hub, lease.epoch, self.table_name
        )
        try:
            await self.index.build()
        except AzureError as exc:
            raise StoreUnavailableError(f"could not build the task hub's index: {exc}") from exc

    async def close(self) -> None:
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
        return await self.instances.get(instance_id)

    async def episode_record(self, instance_id: str) -> InstanceRecord | None:
        # Other hosts write this hub's rows: every episode reads the stored one.
        return await self.get_instance(instance_id)

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
