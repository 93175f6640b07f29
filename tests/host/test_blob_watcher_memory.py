"""The blob watcher's memory of handled versions follows the container, not its past.

A watcher against Azurite, on a container of its own: three blobs are handled and
remembered; then one is deleted and another changed, and after the next scan the deleted
blob and the old version of the changed one are forgotten (the new version is handled and
remembered), so a long-running host does not keep every version it ever saw."""

from __future__ import annotations

import asyncio
import contextlib
import uuid

from azure.core.exceptions import ResourceExistsError
from azure.storage.blob.aio import BlobServiceClient

from durable_host.functions.loader import FunctionInfo
from durable_host.triggers.storage.blob_trigger import RECEIPTS, BlobWatcher
from durable_host.triggers.storage.options import BlobOptions
from durable_host.triggers.storage.spec import Binding
from functions_connections import StorageConnection


def test_a_deleted_or_changed_blob_is_forgotten_by_the_next_scan(storage_account: str) -> None:
    asyncio.run(_scenario(storage_account))


async def _scenario(connection: str) -> None:
    container = "mem" + uuid.uuid4().hex[:12]
    runs: list[str] = []

    async def invoke(info: FunctionInfo, value: object, data: dict[str, object]) -> None:
        runs.append(str(data["BlobTrigger"]))

    async with BlobServiceClient.from_connection_string(connection) as blobs:
        await blobs.create_container(container)
        with contextlib.suppress(ResourceExistsError):  # where the receipts go (run() makes it)
            await blobs.create_container(RECEIPTS)
        client = blobs.get_container_client(container)
        for n in range(3):
            await client.upload_blob(f"b{n}.txt", b"first")
        watcher = BlobWatcher(
            FunctionInfo("on_blob", "storage", lambda blob: None, ()),
            Binding(
                "on_blob",
                "blob",
                "blobTrigger",
                "in",
                StorageConnection("AzureWebJobsStorage", connection),
                path=f"{container}/{{name}}.txt",
                data_type="binary",
            ),
            blobs,
            None,
            "memtest-" + uuid.uuid4().hex[:8],
            BlobOptions(scan_seconds=3600),
            "base64",
            invoke,
            asyncio.Semaphore(4),
        )
        await _settled(watcher)
        assert sorted(name for name, _ in watcher.done) == ["b0.txt", "b1.txt", "b2.txt"]
        old_b1 = next(key for key in watcher.done if key[0] == "b1.txt")

        await client.delete_blob("b0.txt")
        await client.upload_blob("b1.txt", b"second", overwrite=True)
        await _settled(watcher)  # handles b1's new version
        await _settled(watcher)  # a complete listing after it

        assert sorted(name for name, _ in watcher.done) == ["b1.txt", "b2.txt"]
        assert old_b1 not in watcher.done
        assert sorted(runs) == sorted(
            [
                f"{container}/b0.txt",
                f"{container}/b1.txt",
                f"{container}/b1.txt",
                f"{container}/b2.txt",
            ]
        )


async def _settled(watcher: BlobWatcher) -> None:
    """One scan and every run it started."""
    await watcher.scan()
    if watcher._tasks:
        await asyncio.wait(set(watcher._tasks), timeout=30)
