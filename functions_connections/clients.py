"""Azure Storage clients for a connection: a connection string, or service URIs and a token.

``blob_service(connection, aio=False, **options)`` and ``table_service`` return the SDK's
service clients (the async ones from ``.aio`` with ``aio=True``) for a ``StorageConnection``
or a plain connection string, passing ``options`` (timeouts, retry
settings, hooks) through. An identity-based connection gets the process's credential
(``credentials``). A malformed connection string raises ``ConnectionSettingError`` naming the
setting, without quoting it (it holds the account key). ``queue_service`` serves the host's
Storage extension (queue triggers and queue outputs); the app itself uses no queue.
"""

from __future__ import annotations

from typing import Any

from functions_connections.credentials import AsyncCredential, credential_for
from functions_connections.settings import ConnectionSettingError, Service, StorageConnection


def blob_service(connection: StorageConnection | str, *, aio: bool = False, **options: Any) -> Any:
    if aio:
        from azure.storage.blob.aio import BlobServiceClient as AsyncBlobs

        return _build(AsyncBlobs, connection, "blob", aio, options)
    from azure.storage.blob import BlobServiceClient

    return _build(BlobServiceClient, connection, "blob", aio, options)


def queue_service(connection: StorageConnection | str, *, aio: bool = False, **options: Any) -> Any:
    if aio:
        from azure.storage.queue.aio import QueueServiceClient as AsyncQueues

        return _build(AsyncQueues, connection, "queue", aio, options)
    from azure.storage.queue import QueueServiceClient

    return _build(QueueServiceClient, connection, "queue", aio, options)


def table_service(connection: StorageConnection | str, *, aio: bool = False, **options: Any) -> Any:
    if aio:
        from azure.data.tables.aio import TableServiceClient as AsyncTables

        return _build(AsyncTables, connection, "table", aio, options)
    from azure.data.tables import TableServiceClient

    return _build(TableServiceClient, connection, "table", aio, options)


def _build(
    client: Any, connection: StorageConnection | str, service: Service, aio: bool, options: Any
) -> Any:
    if isinstance(connection, str):
        connection = StorageConnection("AzureWebJobsStorage", connection_string=connection)
    if connection.connection_string is not None:
        try:
            return client.from_connection_string(connection.connection_string, **options)
        except ValueError as exc:
            # The SDK's messages describe the form, not the value; still never echo the value.
            raise ConnectionSettingError(
                f"{connection.name} is not a valid storage connection string: {exc}"
            ) from exc
    cred: Any = credential_for(connection)
    if aio:
        cred = AsyncCredential(cred)
    return client(connection.uri(service), credential=cred, **options)
