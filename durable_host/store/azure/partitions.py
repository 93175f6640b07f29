"""Partitions of a task hub that several hosts share: leases, epochs, heartbeats, the fence.

Blobs of the hub's container:

* ``owner`` - the hub's format. Its metadata ``partitions`` is the hub's partition count,
  written once by the first host of this version; a host opened with another count is
  refused (``PartitionCountError`` names both). A hub written by the single-lease version
  has no ``partitions`` yet: while a host of that version holds the lease, a newcomer waits
  as its standby; then it writes the count (under a short lease of its own) and tries to
  hold the blob under an infinite lease, so a host of the single-lease version started
  later waits as a standby for good instead of writing beside the partition owners. The
  metadata ``epoch`` of that version seeds the partitions' epochs, so every head written
  before is older than any partition owner.
* ``partitions/<lane><nn>`` - one blob per partition (``nn`` 00-15), each under a blob lease
  of ``seconds`` with ``epoch`` (raised at every acquisition), ``owner`` and ``lease`` (the
  holder's id and lease id) in its metadata. ``lane`` is empty unless ownership is split by
  app version (``docs/versioning.md``). A partition handed over to a host of another
  version (``hand_over``, ``ownership.handovers``) is released with ``handover`` (that
  version) in its metadata, until the next acquisition rewrites it.
* ``hosts/<hash of the host id>`` - heartbeats: ``owner``, ``version``, ``draining``,
  ``ttl`` (seconds) in the metadata; the blob's ETag, new at every beat, is the token
  ``ownership.Silence`` watches. A heartbeat expires ``ttl`` seconds after its
  Last-Modified, on the service's clock (``ownership.fresh``): each beat's answer carries
  its Last-Modified, this host's reading of that clock (``store_time``), carried on its
  monotonic clock, so a host whose wall clock is an hour off is a member like any other.
  ``expires`` (the writer's Unix time + ttl) is still written for hosts of the earlier
  version, which judge by it; a heartbeat without ``ttl`` (one of theirs) lives for the
  lease + 5 s, as theirs do. ``evict`` releases a silent holder's partition by
  the lease id it wrote in the partition's metadata.

``HubPartitions`` is the ``membership.Backend`` of the Azure store and the store's fence:
``check(partition_key)`` returns the epoch to stamp a commit with while the lease of the
instance's partition is provably held (renewing first when past its local deadline), and
raises ``UnitLostError`` otherwise; ``check_epoch`` loses a partition whose instance head
was written by a newer epoch. As with the hub lease before, the local deadline is the
sent-time of the last successful renewal + duration - ``LEASE_MARGIN``.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Callable
from typing import Any

from azure.core.exceptions import (
    AzureError,
    HttpResponseError,
    ResourceExistsError,
    ResourceNotFoundError,
)
from azure.storage.blob.aio import BlobLeaseClient

from durable_host.cluster.ownership import Member, StoreTime, fresh, partition_of
from durable_host.store.azure.codec import instance_id_of
from durable_host.store.azure.errors import AzureStoreError, is_transient
from durable_host.store.azure.lease import LEASE_MARGIN, STANDBY_POLL, is_dead_process_here
from durable_host.store.base import UnitLostError

log = logging.getLogger("durable_host.store.azure")

HUB_BLOB = "owner"
PARTITIONS_PREFIX = "partitions/"
HOSTS_PREFIX = "hosts/"


class PartitionCountError(AzureStoreError):
    """The hub was created with another partition count than this host's."""


class PartitionLease:
    """The lease this host holds on one partition."""

    def __init__(self, unit: int, client: BlobLeaseClient, epoch: int, valid_until: float):
        self.unit = unit
        self.client = client
        self.epoch = epoch
        self.valid_until = valid_until
        self.lock = asyncio.Lock()


class HubPartitions:
    """Partition leases, heartbeats and the write fence of one host (module docstring)."""

    def __init__(
        self,
        container: Any,
        count: int,
        seconds: int,
        owner: str,
        *,
        lane: str = "",
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self.container = container
        self.count = count
        self.seconds = seconds
        self.owner = owner
        self.lane = lane
        self.units = list(range(count))
        self.on_change = on_change
        self.seed_epoch = 0
        self._held: dict[int, PartitionLease] = {}
        self._wanted: dict[int, str] = {}  # free unit -> the version it was handed over to
        self._leases: dict[int, str] = {}  # held unit -> its holder's lease id (last listing)
        self.acquired_at: dict[int, float] = {}  # unit -> monotonic time it was taken
        self.store_time = StoreTime()  # the service's clock, read at every heartbeat

    def blob(self, unit: int) -> Any:
        return self.container.get_blob_client(f"{PARTITIONS_PREFIX}{self.lane}{unit:02d}")

    # --- the hub's format --------------------------------------------------------------

    async def prepare(self, hub: str) -> None:
        """Check (or write) the hub's partition count; create the partition blobs."""
        blob = self.container.get_blob_client(HUB_BLOB)
        await _create(blob, {})
        announced = False
        while True:
            meta = dict((await blob.get_blob_properties()).metadata)
            stored = meta.get("partitions")
            if stored is not None:
                if int(stored) != self.count:
                    raise PartitionCountError(
                        f"task hub {hub} was created with partitionCount {stored} and this host"
                        f" has partitionCount {self.count}: a hub's partition count cannot"
                        f" change (set extensions.durableTask.storageProvider.partitionCount"
                        f" to {stored}, or use a new hub)"
                    )
                self.seed_epoch = int(meta.get("epoch", "0"))
                await self._hold_forever(blob)
                break
            if await self._format(blob, meta):
                continue
            if meta.get("lease") and is_dead_process_here(meta.get("owner", "")):
                await _release(blob, meta["lease"])
                continue
            if not announced:
                log.warning(
                    "task hub %s is owned by %s, a host of the single-lease version; this host"
                    " waits as its standby",
                    hub,
                    meta.get("owner", "another host"),
                )
                announced = True
            await asyncio.sleep(STANDBY_POLL)
        await asyncio.gather(
            *(_create(self.blob(u), {"epoch": str(self.seed_epoch)}) for u in self.units)
        )

    async def _format(self, blob: Any, meta: dict[str, str]) -> bool:
        """Write the count under a short lease of our own; False if another host holds it."""
        client = BlobLeaseClient(blob)
        try:
            await client.acquire(lease_duration=15)
        except HttpResponseError as exc:
            if exc.status_code in (409, 412) or is_transient(exc):
                return False
            raise
        meta = {**meta, "partitions": str(self.count), "owner": "partitioned task hub"}
        meta.pop("lease", None)
        try:
            await blob.set_blob_metadata(meta, lease=client)
        finally:
            await client.release()
        return True

    async def _hold_forever(self, blob: Any) -> None:
        """Keep hosts of the single-lease version out: they wait while the lease is held."""
        try:
            await BlobLeaseClient(blob).acquire(lease_duration=-1)
        except HttpResponseError:
            pass  # held already (by a host of this version, most likely)

    # --- the membership backend --------------------------------------------------------

    def held(self) -> set[int]:
        return set(self._held)

    def epochs(self) -> dict[int, int]:
        return {u: lease.epoch for u, lease in self._held.items()}

    async def beat(self, me: Member, ttl: float) -> None:
        meta = {
            "owner": me.id,
            "version": me.version,
            "draining": "1" if me.draining else "",
            "ttl": f"{ttl:.0f}",
            "expires": f"{time.time() + ttl:.3f}",  # for hosts of the earlier version only
            **dict(me.extra),
        }
        sent = time.monotonic()
        answer = await self._host_blob(me.id).upload_blob(
            b"", overwrite=True, metadata=_ascii(meta)
        )
        stamped = (answer or {}).get("last_modified")
        if stamped is not None:
            self.store_time.read(stamped.timestamp(), sent, time.monotonic())

    def store_now(self) -> float | None:
        """The service's time now, as this host last read it (None: no heartbeat yet)."""
        return self.store_time.now(time.monotonic())

    async def forget(self, me: Member) -> None:
        try:
            await self._host_blob(me.id).delete_blob()
        except ResourceNotFoundError:
            pass

    def _host_blob(self, member: str) -> Any:
        return self.container.get_blob_client(
            HOSTS_PREFIX + hashlib.sha256(member.encode()).hexdigest()[:32]
        )

    async def members(self) -> list[Member]:
        """Heartbeats not expired on the service's clock; a dead process of this machine is
        no member (a restart)."""
        listed: list[tuple[str, dict[str, str], str]] = []
        beats: dict[str, tuple[float, float]] = {}
        async for item in self.container.list_blobs(
            name_starts_with=HOSTS_PREFIX, include=["metadata"]
        ):
            meta = dict(item.metadata or {})
            owner = meta.get("owner", "")
            if not owner or is_dead_process_here(owner):
                continue
            stamped = item.last_modified.timestamp() if item.last_modified else 0.0
            beats[owner] = (stamped, _float(meta.get("ttl"), self.seconds + 5.0))
            listed.append((owner, meta, str(item.etag or "")))
        live = fresh(beats, self.store_now())
        found = []
        for owner, meta, etag in listed:
            if owner not in live:
                continue
            extra = {k: v for k, v in meta.items() if k not in _HEARTBEAT_KEYS}
            found.append(
                Member(
                    owner,
                    meta.get("version", ""),
                    bool(meta.get("draining")),
                    extra,
                    beat=etag,
                )
            )
        return found

    async def holdings(self) -> dict[int, str | None]:
        """Who holds which partition of this lane (None: free). A dead process of this
        machine holding one has its lease released here: a restart takes over at once."""
        found: dict[int, str | None] = dict.fromkeys(self.units)
        wanted: dict[int, str] = {}
        leases: dict[int, str] = {}
        prefix = PARTITIONS_PREFIX + self.lane
        async for item in self.container.list_blobs(name_starts_with=prefix, include=["metadata"]):
            suffix = item.name[len(prefix) :]
            if not suffix.isdigit() or int(suffix) not in found:
                continue
            meta = dict(item.metadata or {})
            if item.lease.state != "leased":
                if meta.get("handover") is not None:
                    wanted[int(suffix)] = meta["handover"]
                continue
            holder = meta.get("owner", "")
            if meta.get("lease") and holder != self.owner and is_dead_process_here(holder):
                log.warning(
                    "partition %s was held by %s, a dead process on this machine: released",
                    suffix,
                    holder,
                )
                await _release(self.blob(int(suffix)), meta["lease"])
                continue
            found[int(suffix)] = holder or "?"
            leases[int(suffix)] = meta.get("lease", "")
        self._wanted, self._leases = wanted, leases
        return found

    async def evict(self, unit: int, holder: str) -> bool:
        """Release the lease of a partition whose holder's heartbeat stopped, by the lease
        id the holder wrote when it took it (as ``holdings`` last listed it)."""
        lease_id = self._leases.get(unit)
        if not lease_id or holder == self.owner:
            return False
        try:
            await BlobLeaseClient(self.blob(unit), lease_id=lease_id).release()
        except AzureError as exc:
            log.info("partition %d: could not evict %s: %s", unit, holder, exc)
            return False
        return True

    def wanted(self) -> dict[int, str]:
        """Free partitions handed over for a version, as the last ``holdings`` found them."""
        return dict(self._wanted)

    def held_for(self) -> dict[int, float]:
        """Seconds since this host took each partition it holds."""
        now = time.monotonic()
        return {u: now - t for u, t in self.acquired_at.items() if u in self._held}

    async def hand_over(self, unit: int, version: str) -> None:
        """Release the partition marked for hosts of ``version`` (``ownership.handovers``)."""
        lease = self._held.get(unit)
        if lease is None:
            return
        meta = {"epoch": str(lease.epoch), "owner": self.owner, "lease": lease.client.id}
        try:
            async with lease.lock:
                await self.blob(unit).set_blob_metadata(
                    _ascii({**meta, "handover": version}), lease=lease.client
                )
        except AzureError as exc:
            log.warning("partition %d: could not mark it for version %s: %s", unit, version, exc)
        await self.release(unit)

    async def acquire(self, unit: int, holder: str | None) -> bool:
        """Take the partition's lease and raise its epoch; False if someone holds it."""
        if unit in self._held:
            return True
        blob = self.blob(unit)
        client = BlobLeaseClient(blob)
        sent = time.monotonic()
        try:
            await client.acquire(lease_duration=self.seconds)
        except HttpResponseError as exc:
            if exc.status_code in (409, 412) or is_transient(exc):
                return False
            raise
        try:
            meta = dict((await blob.get_blob_properties()).metadata)
            epoch = int(meta.get("epoch", "0")) + 1
            await blob.set_blob_metadata(
                {"epoch": str(epoch), "owner": self.owner, "lease": client.id}, lease=client
            )
        except AzureError:
            await _release(blob, client.id)
            raise
        self._held[unit] = PartitionLease(unit, client, epoch, sent + self.seconds - LEASE_MARGIN)
        self.acquired_at[unit] = time.monotonic()
        log.info("partition %d of %d: this host holds it as epoch %d", unit, self.count, epoch)
        self._changed()
        return True

    async def renew_all(self) -> None:
        await asyncio.gather(*(self._renew(u) for u in list(self._held)), return_exceptions=True)

    async def _renew(self, unit: int) -> None:
        lease = self._held.get(unit)
        if lease is None:
            return
        async with lease.lock:
            sent = time.monotonic()
            if lease.valid_until - sent > self.seconds - LEASE_MARGIN - 1.0:
                return  # renewed a moment ago by a concurrent caller
            try:
                await lease.client.renew()
            except HttpResponseError as exc:
                if is_transient(exc):
                    raise
                self.lose(unit, f"its lease renewal was refused ({exc.status_code})")
                return
            lease.valid_until = sent + self.seconds - LEASE_MARGIN

    async def release(self, unit: int) -> None:
        lease = self._held.pop(unit, None)
        self.acquired_at.pop(unit, None)
        if lease is None:
            return
        self._changed()
        async with lease.lock:
            try:
                await lease.client.release()
            except AzureError as exc:
                log.warning("partition %d: release failed, its lease lapses: %s", unit, exc)

    def lose(self, unit: int, why: str) -> None:
        if self._held.pop(unit, None) is None:
            return
        self.acquired_at.pop(unit, None)
        log.warning("partition %d lost: %s; this host stops writing to it", unit, why)
        self._changed()

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    # --- the fence ---------------------------------------------------------------------

    def unit_of(self, partition_key: str) -> int:
        return partition_of(instance_id_of(partition_key), self.count)

    def owns(self, partition_key: str) -> bool:
        return self.unit_of(partition_key) in self._held

    async def check(self, partition_key: str) -> int:
        """The epoch to write with, while the instance's partition is provably ours."""
        unit = self.unit_of(partition_key)
        lease = self._held.get(unit)
        if lease is not None and time.monotonic() >= lease.valid_until:
            await self._renew(unit)
            lease = self._held.get(unit)
        if lease is None:
            raise UnitLostError(
                f"this host does not own partition {unit} (instance {instance_id_of(partition_key)})"
            )
        return lease.epoch

    def epoch_of(self, partition_key: str) -> int:
        unit = self.unit_of(partition_key)
        lease = self._held.get(unit)
        if lease is None:
            raise UnitLostError(f"this host does not own partition {unit}")
        return lease.epoch

    def check_epoch(self, partition_key: str, epoch: int) -> None:
        """A head written by a newer epoch of its partition: another host took it over."""
        unit = self.unit_of(partition_key)
        lease = self._held.get(unit)
        if lease is None:
            raise UnitLostError(f"this host does not own partition {unit}")
        if epoch > lease.epoch:
            self.lose(
                unit, f"a newer owner (epoch {epoch}) wrote to it; this host had {lease.epoch}"
            )
            raise UnitLostError(f"partition {unit} was taken over by epoch {epoch}")

    async def close(self) -> None:
        for unit in list(self._held):
            await self.release(unit)


_HEARTBEAT_KEYS = ("owner", "version", "draining", "expires", "ttl")


def _float(text: str | None, default: float) -> float:
    try:
        return float(text) if text else default
    except ValueError:
        return default


def _ascii(meta: dict[str, str]) -> dict[str, str]:
    return {k: v.encode("ascii", "replace").decode() for k, v in meta.items()}


async def _create(blob: Any, metadata: dict[str, str]) -> None:
    try:
        await blob.upload_blob(b"", overwrite=False, metadata=metadata or None)
    except ResourceExistsError:
        pass
    except HttpResponseError as exc:
        if exc.status_code not in (409, 412):
            raise


async def _release(blob: Any, lease_id: str) -> None:
    try:
        await BlobLeaseClient(blob, lease_id=lease_id).release()
    except AzureError:
        pass
