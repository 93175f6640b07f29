"""Microsoft's Python v2 Storage quickstarts (``tests/apps/storage_quickstart``) on the host with
``AzureWebJobsStorage=UseDevelopmentStorage=true`` and the task hub in SQLite: the host starts
its own Azurite for the bindings (nothing else to install or start), the HTTP function's queue
output and the blob trigger template behave as documented, and the Azurite stops with the host.

Skipped when something already answers on 127.0.0.1:10000-10002: the host would then use that
emulator instead of starting its own, which is not what this test is about."""

from __future__ import annotations

import base64
import shutil
from pathlib import Path

import pytest
from azure.storage.blob import BlobServiceClient
from azure.storage.queue import QueueServiceClient

from durable_host.ops import azurite
from tests.harness import APPS, HostProcess, wait_for


def test_the_quickstarts_run_on_the_hosts_own_azurite(tmp_path: Path) -> None:
    if any(azurite.answers("127.0.0.1", (port,)) for port in azurite.DEFAULT_PORTS):
        pytest.skip("an Azure Storage emulator already answers on 127.0.0.1:10000-10002")
    app = tmp_path / "app"  # the host keeps its Azurite's files under <app>/.durable
    shutil.copytree(APPS / "storage_quickstart", app, ignore=shutil.ignore_patterns("__pycache__"))
    host = HostProcess(
        app,
        f"sqlite:{tmp_path / 'hub.db'}",
        env={
            "AzureWebJobsStorage": "UseDevelopmentStorage=true",
            "DURABLE_HOST_BLOB_SCAN_SECONDS": "0.3",
        },
        log_path=tmp_path / "host.log",
    ).start(timeout=60)
    try:
        greeting = host.get("/api/http_trigger?name=Ann")
        assert greeting.body == b"Hello, Ann. This HTTP triggered function executed successfully."
        assert host.get("/api/http_trigger").body.startswith(b"Pass a name")

        development = azurite.connection_string()
        queue = QueueServiceClient.from_connection_string(development).get_queue_client("outqueue")
        assert [base64.b64decode(m.content) for m in queue.peek_messages()] == [b"Ann"]
        blobs = BlobServiceClient.from_connection_string(development)
        blobs.create_container("samples-workitems")
        blobs.get_blob_client("samples-workitems", "a/b.txt").upload_blob(b"12345")

        assert host.log_path is not None
        log = host.log_path
        wait_for(
            lambda: (
                "processed blob Name: samples-workitems/a/b.txt Blob Size: 5 bytes"
                in log.read_text()
            ),
            30,
            "the blob trigger's log line",
        )
    finally:
        assert host.stop() == 0
    wait_for(
        lambda: not azurite.answers("127.0.0.1", azurite.DEFAULT_PORTS, 0.2),
        30,
        "the host's Azurite to stop with it",
    )
