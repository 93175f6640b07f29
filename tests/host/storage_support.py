"""What the Storage extension's tests share: the test app, its settings, and a look into Azurite
through the storage SDKs (what a test writes or checks there, never through the host)."""

from __future__ import annotations

import base64
import json
import uuid
from typing import Any

from azure.core.exceptions import ResourceExistsError, ResourceNotFoundError
from azure.data.tables import TableServiceClient
from azure.storage.blob import BlobServiceClient
from azure.storage.queue import QueueServiceClient

from tests.harness import wait_for

APP = "storage"


def env(connection: str, **more: str) -> dict[str, str]:
    """The test app's settings: ``AppStorage`` on the test's Azurite, short leases and scans,
    and queues and containers of their own for what a test sends or looks for (every suite's
    hosts share one Azurite, and the hosts of other modules run meanwhile: a host listening
    on the same queue, or watching the same samples, would run the test's messages and blobs
    too)."""
    return {
        "AppStorage": connection,
        "STAMP_CONTAINER": unique("stamps-"),
        "SAMPLES_CONTAINER": unique("samples-"),
        "TIMER_CONTAINER": unique("timers-"),
        "JOBS_QUEUE": unique("jobs-"),
        "FAILING_QUEUE": unique("failing-"),
        "SLOW_QUEUE": unique("slow-"),
        "PLAIN_QUEUE": "plain-base64",
        "DURABLE_HOST_QUEUE_LEASE_SECONDS": "3",
        "DURABLE_HOST_BLOB_SCAN_SECONDS": "0.3",
        **more,
    }


def unique(prefix: str = "t") -> str:
    return f"{prefix}{uuid.uuid4().hex[:10]}"


class Account:
    def __init__(self, connection: str) -> None:
        self.blobs = BlobServiceClient.from_connection_string(connection)
        self.queues = QueueServiceClient.from_connection_string(connection)
        self.tables = TableServiceClient.from_connection_string(connection)

    def blob(self, container: str, name: str) -> bytes | None:
        try:
            return self.blobs.get_blob_client(container, name).download_blob().readall()
        except ResourceNotFoundError:
            return None

    def names(self, container: str, prefix: str) -> list[str]:
        """The blobs of ``container`` whose names start with ``prefix`` (none: no container)."""
        try:
            return [b.name for b in self.blobs.get_container_client(container).list_blobs(prefix)]
        except ResourceNotFoundError:
            return []

    def put_blob(self, container: str, name: str, data: bytes | str) -> None:
        try:
            self.blobs.create_container(container)
        except ResourceExistsError:
            pass
        self.blobs.get_blob_client(container, name).upload_blob(data, overwrite=True)

    def wait_blob(self, container: str, name: str, timeout: float = 30) -> bytes:
        return wait_for(lambda: self.blob(container, name), timeout, f"blob {container}/{name}")

    def send(self, queue: str, text: str, encoding: str = "base64") -> None:
        client = self.queues.get_queue_client(queue)
        try:
            client.create_queue()
        except ResourceExistsError:
            pass
        body = base64.b64encode(text.encode()).decode() if encoding == "base64" else text
        client.send_message(body)

    def messages(self, queue: str, encoding: str = "base64") -> list[str]:
        """The visible messages' bodies (peeked: they stay), decoded."""
        try:
            found = self.queues.get_queue_client(queue).peek_messages(max_messages=32)
        except ResourceNotFoundError:
            return []
        out = []
        for message in found:
            text = message.content
            out.append(base64.b64decode(text).decode() if encoding == "base64" else text)
        return out

    def length(self, queue: str) -> int:
        try:
            props = self.queues.get_queue_client(queue).get_queue_properties()
        except ResourceNotFoundError:
            return 0
        return int(props.approximate_message_count or 0)

    def runs(self, partition: str) -> list[dict[str, Any]]:
        """Rows the test app's triggered functions wrote to ``runs`` (one per run)."""
        table = self.tables.get_table_client("runs")
        try:
            return [dict(e) for e in table.query_entities(f"PartitionKey eq '{partition}'")]
        except ResourceNotFoundError:
            return []


def as_json(data: bytes | None) -> Any:
    assert data is not None
    return json.loads(data)


def module_host(
    request: Any, tmp_path_factory: Any, connection: str, name: str, **settings: str
) -> Any:
    """One host of the test app for a whole module, on the store ``request.param`` names
    (the suites' store parametrisation; a hub of its own on the shared stores)."""
    from tests.conftest import azure_env, postgres_env
    from tests.harness import APPS, HostProcess, store_spec_for

    kind = str(request.param)
    folder = tmp_path_factory.mktemp(name)
    hub_env: dict[str, str] = {}
    if kind == "azure":
        hub_env = azure_env(request, name)
    elif kind == "postgres":
        hub_env = postgres_env(request, name)
    return HostProcess(
        APPS / APP,
        store_spec_for(kind, folder, name),
        env={**hub_env, **env(connection, **settings)},
        log_path=folder / f"{name}.log",
    )
