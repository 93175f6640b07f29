"""Ownership of a task hub: one host process writes to it at a time.

``HubLease`` is a blob lease on ``<container>/owner`` plus an epoch in the blob's metadata.
``open`` takes it (a second host waits as a standby and takes over when the lease lapses,
or at once when the recorded holder is a dead process of this very machine), a background
task renews it every third of its duration, and every write first calls ``check``.

The host trusts its lease only until ``valid_until``: a monotonic deadline computed from
the moment a renewal request was *sent*, minus ``LEASE_MARGIN``, so the local deadline
always comes before the service's. Past it, ``check`` renews before the write goes ahead;
a refused renewal (another host has the lease) makes the lease lost for good:
``HubLeaseLostError`` from then on, and ``on_lost`` is called once.

The epoch is the second fence: every head row carries the epoch of the host that wrote
it, and a head written by a newer epoch means another owner took over
(``HubTables.check_epoch``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Callable
from typing import Any

from azure.core.exceptions import (
    AzureError,
    HttpResponseError,
    ResourceExistsError,
    ServiceRequestError,
    ServiceResponseError,
)
from azure.storage.blob.aio import BlobLeaseClient

from durable_host.store.azure.errors import HubLeaseLostError, is_transient

log = logging.getLogger("durable_host.store.azure")

LEASE_MARGIN = 3.0  # seconds of a lease we never rely on (clock rate, request latency)
STANDBY_POLL = 2.0  # how often a standby host tries to take the lease


def process_identity() -> str:
    """``host|boot|pid-namespace|pid``: enough to tell, on the same machine, whether a
    recorded lease holder is a process that no longer exists."""
    boot = _read("/proc/sys/kernel/random/boot_id")
    try:
        namespace = str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        namespace = ""
    return f"{socket.gethostname()}|{boot}|{namespace}|{os.getpid()}"


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def is_dead_process_here(identity: str) -> bool:
    """Is ``identity`` (a ``process_identity``) a process of this machine that is gone?"""
    parts = identity.split("|")
    mine = process_identity().split("|")
    if len(parts) < 4 or not parts[1] or not parts[2] or parts[:3] != mine[:3]:
        return False  # another machine, or one we cannot judge: wait for the lease to expire
    stat = _read(f"/proc/{parts[3]}/stat")
    if not stat:
        return True
    return stat.rpartition(")")[2].split()[0] in ("Z", "X")  # a zombie is dead too


class HubLease:
    """A blob lease on ``<container>/owner`` plus an epoch in the blob's metadata."""

    def __init__(
        self, blob: Any, seconds: int, owner: str, on_lost: Callable[[str], None] | None
    ) -> None:
        self.blob = blob
        self.seconds = seconds
        self.owner = owner
        self.on_lost = on_lost
        self.client = BlobLeaseClient(blob)
        self.epoch = 0
        self.valid_until = 0.0
        self.lost: str | None = None
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None

    async def acquire(self, hub: str) -> None:
        """Take the lease, waiting as a standby while another live host holds it."""
        await self._create_blob()
        announced = False
        while True:
            sent = time.monotonic()
            if await self._try_acquire():
                break
            holder = await self._holder()
            if await self._release_if_dead(holder):
                continue
            if not announced:
                log.warning(
                    "task hub %s is owned by %s; this host waits as a standby and takes over"
                    " when that host stops renewing its lease",
                    hub,
                    holder.get("owner", "another host"),
                )
                announced = True
            await asyncio.sleep(STANDBY_POLL)
        self.valid_until = sent + self.seconds - LEASE_MARGIN
        self._task = asyncio.create_task(self._renew_loop())

    async def _try_acquire(self) -> bool:
        """One attempt: take the lease and record epoch and holder on the blob."""
        try:
            await self.client.acquire(lease_duration=self.seconds)
            await self._bump_epoch()
            return True
        except HttpResponseError as exc:
            if exc.status_code not in (409, 412) and not is_transient(exc):
                raise
        except (ServiceRequestError, ServiceResponseError):
            pass
        return False

    async def _release_if_dead(self, holder: dict[str, str]) -> bool:
        """Free the lease of a holder that is a dead process on this very machine.

        A host restarted after a crash then takes over at once instead of waiting for
        the lease to expire. Only that holder's lease id is released: if anyone has
        taken the lease since, the release is refused and we wait as usual. A stopped
        (not dead) process still counts as alive.
        """
        if not holder.get("lease") or not is_dead_process_here(holder.get("owner", "")):
            return False
        log.warning(
            "the previous owner %s is a dead process on this machine; taking over", holder["owner"]
        )
        try:
            await BlobLeaseClient(self.blob, lease_id=holder["lease"]).release()
        except (HttpResponseError, ServiceRequestError, ServiceResponseError):
            return False
        return True

    async def _create_blob(self) -> None:
        try:
            await self.blob.upload_blob(b"", overwrite=False)
        except ResourceExistsError:
            pass
        except HttpResponseError as exc:
            if exc.status_code not in (409, 412):
                raise

    async def _holder(self) -> dict[str, str]:
        try:
            props = await self.blob.get_blob_properties()
            return dict(props.metadata)
        except AzureError:
            return {}

    async def _bump_epoch(self) -> None:
        props = await self.blob.get_blob_properties()
        epoch = int(props.metadata.get("epoch", "0")) + 1
        await self.blob.set_blob_metadata(
            {"epoch": str(epoch), "owner": self.owner, "lease": self.client.id}, lease=self.client
        )
        self.epoch = epoch

    async def check(self) -> None:
        """Return when the lease is provably held; raise ``HubLeaseLostError`` if not held."""
        if self.lost is not None:
            raise HubLeaseLostError(self.lost)
        if time.monotonic() < self.valid_until:
            return
        await self.renew()

    async def renew(self) -> None:
        async with self._lock:
            if self.lost is not None:
                raise HubLeaseLostError(self.lost)
            sent = time.monotonic()
            if self.valid_until - sent > self.seconds - LEASE_MARGIN - 1.0:
                return  # renewed a moment ago by a concurrent caller
            try:
                await self.client.renew()
            except HttpResponseError as exc:
                if is_transient(exc):
                    raise
                # Set by the storage SDK's error handling only, not by azure-core.
                code = getattr(exc, "error_code", None) or exc.status_code
                self.lose(f"lost the ownership lease of the task hub ({code}): another host has it")
                raise HubLeaseLostError(self.lost or "") from None
            self.valid_until = sent + self.seconds - LEASE_MARGIN

    async def _renew_loop(self) -> None:
        while self.lost is None:
            await asyncio.sleep(self.seconds / 3)
            try:
                await self.renew()
            except HubLeaseLostError:
                return
            except AzureError as exc:
                log.warning("could not renew the task hub lease (will retry): %s", exc)

    def lose(self, reason: str) -> None:
        if self.lost is not None:
            return
        self.lost = reason
        log.critical("%s; this host stops writing to the task hub", reason)
        if self.on_lost is not None:
            self.on_lost(reason)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self.lost is None and self.epoch:
            try:
                await asyncio.wait_for(self.client.release(), 5.0)
            except (AzureError, TimeoutError):
                pass  # the lease lapses by itself
