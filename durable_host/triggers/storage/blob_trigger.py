"""The blob trigger: each new or changed blob runs its function once, across hosts and restarts. IO.

**Scan.** One watcher per blob-triggered function lists its container (from the path's
literal prefix) every ``DURABLE_HOST_BLOB_SCAN_SECONDS`` (10 s by default) and matches each
name against the path pattern (``samples/{name}.txt``); a blob this host writes through an
output binding wakes the watcher of its container at once (the extension's blob-written
watcher). The latency of a trigger is at most one scan interval plus the function's queueing
behind ``maxDegreeOfParallelism`` (the extension's polling
scan has minutes of latency on its default plans; its Event Grid source is not run here).
A listing costs one request per 5,000 blobs; a blob already handled costs nothing after the
first scan of a process (this process remembers it), and one receipt read after a restart.
What a process remembers is bounded by what the container holds, not by what it ever held: a
complete listing forgets the versions it no longer shows (a blob deleted or changed since).

**Receipts, as the extension keeps them.** A blob version (its ETag) is handled once per
function: the receipt is the blob
``azure-webjobs-hosts/blobreceipts/<hostId>/Host.Functions.<function>/<etag>/<container>/<blob>``
in the trigger's own storage account (the extension uses ``AzureWebJobsStorage``'s; here the
task hub need not be in Azure Storage at all). ``hostId`` is ``AzureFunctionsWebHost__hostid``
when set, else the task hub's name, lowercased - so every host of one app shares receipts,
and two apps on one account do not. A host takes a blob by creating the receipt if absent and
then acquiring a 30-second lease on it (renewed while the function runs): a second host finds
the lease held and skips the blob; a killed host's lease ends and the next scan anywhere takes
the blob again. The receipt's metadata counts the attempts and marks the blob ``Completed``
after a success.

**Poison.** A failed attempt is tried again at a later scan; after ``poisonBlobThreshold``
attempts (5) the extension's message (``{"Type": "BlobTrigger", "FunctionId", "BlobType",
"ContainerName", "BlobName", "ETag"}``) goes to the ``webjobs-blobtrigger-poison`` queue and the
receipt is marked completed. A blob deleted before its function ran is marked completed.

The function gets the blob as its annotation asks (``func.InputStream`` with ``name``
``<container>/<blob>``, ``uri`` and ``length``; ``str``; ``bytes``); its binding data are the
path's captures, ``BlobTrigger`` (``<container>/<blob>``), ``Uri``, ``Properties`` and
``Metadata``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

from azure.core.exceptions import HttpResponseError, ResourceExistsError, ResourceNotFoundError

from durable_host.functions.loader import FunctionInfo
from durable_host.triggers.storage import expressions
from durable_host.triggers.storage.binder import blob_value, encode_message
from durable_host.triggers.storage.options import BlobOptions
from durable_host.triggers.storage.spec import Binding

log = logging.getLogger("durable_host.storage")
Invoke = Callable[[FunctionInfo, Any, dict[str, Any]], Awaitable[Any]]
RECEIPTS = "azure-webjobs-hosts"
POISON_QUEUE = "webjobs-blobtrigger-poison"
LEASE_SECONDS = 30


def host_id(env: dict[str, str] | Any, hub: str) -> str:
    given = (env.get("AzureFunctionsWebHost__hostid") or "").strip()
    return given or re.sub(r"[^a-z0-9-]", "-", hub.lower())[:32]


def receipt_name(host: str, function: str, etag: str, container: str, blob: str) -> str:
    return f"blobreceipts/{host}/Host.Functions.{function}/{etag}/{container}/{blob}"


class BlobWatcher:
    def __init__(
        self,
        info: FunctionInfo,
        binding: Binding,
        blobs: Any,  # the connection's async BlobServiceClient
        queues: Any | None,  # its QueueServiceClient, for the poison queue
        host: str,
        options: BlobOptions,
        message_encoding: str,
        invoke: Invoke,
        slots: asyncio.Semaphore,
    ) -> None:
        self.info, self.binding, self.options, self.invoke = info, binding, options, invoke
        self.blobs, self.queues, self.host, self.slots = blobs, queues, host, slots
        self.encoding = message_encoding
        self.pattern = expressions.pattern(binding.blob_pattern or "{name}")
        self.prefix = expressions.literal_prefix(binding.blob_pattern)
        self.done: set[tuple[str, str]] = set()
        self.running: set[tuple[str, str]] = set()
        self.stats = {"succeeded": 0, "failed": 0, "poisoned": 0, "scans": 0}
        self.pending = 0  # matching blobs not yet handled at the last scan
        self._stop = asyncio.Event()
        self._wake = asyncio.Event()  # set by ``stop`` and ``notify``
        self._tasks: set[asyncio.Task[None]] = set()

    async def run(self) -> None:
        with contextlib.suppress(ResourceExistsError):
            await self.blobs.create_container(RECEIPTS)
        while not self._stop.is_set():
            self._wake.clear()  # before the scan: a blob written meanwhile wakes the next one
            try:
                await self.scan()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - a storage outage must not end the watcher
                log.warning("blob trigger %s: scan failed: %s", self.info.name, exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.options.scan_seconds)
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def notify(self) -> None:
        """A blob was just written to the container: scan now, not at the next interval."""
        self._wake.set()

    async def scan(self, *, dry: bool = False) -> None:
        """Take every matching blob not handled yet; ``dry``: only count them in ``pending``."""
        container = self.blobs.get_container_client(self.binding.container)
        pending = 0
        listed: set[tuple[str, str]] = set()
        try:
            async for blob in container.list_blobs(name_starts_with=self.prefix or None):
                match = self.pattern.match(blob.name)
                key = (blob.name, blob.etag)
                if match is None:
                    continue
                listed.add(key)
                if key in self.done or key in self.running:
                    continue
                if dry:
                    pending += 0 if await self._completed(blob) else 1
                    continue
                pending += 1
                self.running.add(key)
                task = asyncio.create_task(self._bounded(blob, match.groupdict()))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        except ResourceNotFoundError:
            pass  # no container (yet, or any more): nothing in it to remember
        # Reached only after a complete listing (a failed one raises): what it did not show
        # was deleted or changed, and is never listed again under that version.
        self.done &= listed
        self.pending = pending
        self.stats["scans"] += 1

    async def _completed(self, blob: Any) -> bool:
        name = receipt_name(self.host, self.info.name, blob.etag, self.binding.container, blob.name)
        try:
            props = await self.blobs.get_blob_client(RECEIPTS, name).get_blob_properties()
        except ResourceNotFoundError:
            return False
        return (props.metadata or {}).get("Completed") == "true"

    async def _bounded(self, blob: Any, captures: dict[str, str]) -> None:
        key = (blob.name, blob.etag)
        try:
            async with self.slots:
                await self._handle(blob, captures)
        except Exception as exc:  # noqa: BLE001 - tried again at the next scan
            log.warning("blob trigger %s: %s: %s", self.info.name, blob.name, exc)
        finally:
            self.running.discard(key)

    async def _handle(self, blob: Any, captures: dict[str, str]) -> None:
        key = (blob.name, blob.etag)
        name = receipt_name(self.host, self.info.name, blob.etag, self.binding.container, blob.name)
        receipt = self.blobs.get_blob_client(RECEIPTS, name)
        try:
            props = await receipt.get_blob_properties()
        except ResourceNotFoundError:
            with contextlib.suppress(ResourceExistsError):
                await receipt.upload_blob(b"", overwrite=False, metadata={"Attempts": "0"})
            props = await receipt.get_blob_properties()
        if (props.metadata or {}).get("Completed") == "true":
            self.done.add(key)
            return
        try:
            lease = await receipt.acquire_lease(lease_duration=LEASE_SECONDS)
        except HttpResponseError as exc:
            if exc.status_code == 409:
                return  # another host runs it now
            raise
        renew = asyncio.create_task(self._renew(lease))
        try:
            metadata = dict((await receipt.get_blob_properties()).metadata or {})
            if metadata.get("Completed") == "true":
                self.done.add(key)
                return
            attempts = int(metadata.get("Attempts") or 0)
            if attempts >= self.options.poison_blob_threshold:
                await self._poison(blob, receipt, lease, metadata)
                return
            metadata["Attempts"] = str(attempts + 1)
            await receipt.set_blob_metadata(metadata, lease=lease)
            outcome = await self._run(blob, captures)
            if outcome is None or outcome:
                metadata["Completed"] = "true"
                await receipt.set_blob_metadata(metadata, lease=lease)
                self.done.add(key)
                if outcome:
                    self.stats["succeeded"] += 1
            else:
                self.stats["failed"] += 1
                if attempts + 1 >= self.options.poison_blob_threshold:
                    await self._poison(blob, receipt, lease, metadata)
        finally:
            renew.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renew
            with contextlib.suppress(HttpResponseError):
                await lease.release()

    async def _renew(self, lease: Any) -> None:
        while True:
            await asyncio.sleep(LEASE_SECONDS / 3)
            with contextlib.suppress(HttpResponseError):
                await lease.renew()

    async def _run(self, blob: Any, captures: dict[str, str]) -> bool | None:
        """True: the function succeeded; False: it failed; None: the blob is gone."""
        client = self.blobs.get_blob_client(self.binding.container, blob.name)
        try:
            data = await (await client.download_blob()).readall()
        except ResourceNotFoundError:
            return None
        path = f"{self.binding.container}/{blob.name}"
        metadata: dict[str, Any] = {
            **captures,
            "BlobTrigger": path,
            "Uri": client.url,
            "Properties": {
                "Length": blob.size,
                "ContentType": getattr(blob.content_settings, "content_type", None),
                "ETag": blob.etag,
                "LastModified": blob.last_modified.isoformat() if blob.last_modified else None,
            },
            "Metadata": dict(blob.metadata or {}),
        }
        value = blob_value(self.binding, data, metadata)
        try:
            await self.invoke(self.info, value, metadata)
        except Exception:
            log.exception("function %s failed on blob %s", self.info.name, path)
            return False
        return True

    async def _poison(self, blob: Any, receipt: Any, lease: Any, metadata: dict[str, str]) -> None:
        message = json.dumps(
            {
                "Type": "BlobTrigger",
                "FunctionId": f"Host.Functions.{self.info.name}",
                "BlobType": str(getattr(blob.blob_type, "value", None) or "BlockBlob"),
                "ContainerName": self.binding.container,
                "BlobName": blob.name,
                "ETag": blob.etag,
            }
        )
        log.warning(
            "blob trigger %s: %s failed %s times; moved to queue '%s'",
            self.info.name,
            blob.name,
            metadata.get("Attempts"),
            POISON_QUEUE,
        )
        if self.queues is not None:
            queue = self.queues.get_queue_client(POISON_QUEUE)
            text = encode_message(message, self.encoding)
            try:
                await queue.send_message(text)
            except ResourceNotFoundError:
                with contextlib.suppress(ResourceExistsError):
                    await queue.create_queue()
                await queue.send_message(text)
        metadata["Completed"] = "true"
        metadata["Poisoned"] = "true"
        await receipt.set_blob_metadata(metadata, lease=lease)
        self.done.add((blob.name, blob.etag))
        self.stats["poisoned"] += 1
