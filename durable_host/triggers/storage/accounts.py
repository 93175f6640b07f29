"""The storage accounts an app's bindings name: one async client per connection and service. IO.

``Accounts.open(connections)`` runs at start-up, before any function can run: a connection
string ``UseDevelopmentStorage=true`` means the host's own Azurite (``ops.azurite.ensure``:
started from the project's npm package when nothing answers on 127.0.0.1:10000-10002, kept
under ``<app>/.durable/azurite``, stopped with the host) - whatever store holds the task hub,
so an app with storage bindings needs nothing else on a developer's machine. A connection
string the SDK refuses stops the start naming the setting (never quoting it). Clients are
built once per connection and service (``functions_connections``: connection string or
identity) and closed by ``close``.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

from durable_host.ops import azurite
from durable_host.triggers.storage.spec import StorageConfigError
from functions_connections import (
    ConnectionSettingError,
    StorageConnection,
    blob_service,
    queue_service,
    table_service,
)

# The SDK logs every request at INFO: a polling listener would flood the host's log.
logging.getLogger("azure.core.pipeline.policies.http_logging_policy").setLevel(logging.WARNING)
_BUILDERS = {"blob": blob_service, "queue": queue_service, "table": table_service}


class Accounts:
    def __init__(self, azurite_location: Path) -> None:
        self.azurite_location = azurite_location
        self._azurite: azurite.Azurite | None = None
        self._connections: dict[str, StorageConnection] = {}
        self._clients: dict[tuple[str, str], Any] = {}

    async def open(self, connections: dict[str, tuple[StorageConnection, set[str]]]) -> None:
        """Build each connection's clients (``{name: (connection, services)}``)."""
        for name, (connection, services) in connections.items():
            if connection.connection_string is not None and azurite.is_development_storage(
                connection.connection_string
            ):
                await self._ensure_azurite()
                connection = StorageConnection(name, connection_string=azurite.connection_string())
            self._connections[name] = connection
            for service in sorted(services):
                try:
                    self._clients[(name, service)] = _BUILDERS[service](connection, aio=True)
                except ConnectionSettingError as exc:
                    raise StorageConfigError(f"connection '{name}': {exc}") from None

    async def _ensure_azurite(self) -> None:
        if self._azurite is not None:
            return
        try:
            self._azurite = await asyncio.to_thread(
                azurite.ensure, "UseDevelopmentStorage=true", self.azurite_location
            )
        except azurite.AzuriteError as exc:
            raise StorageConfigError(f"UseDevelopmentStorage=true: {exc}") from exc

    def client(self, connection: str, service: str) -> Any:
        return self._clients[(connection, service)]

    def blobs(self, connection: str) -> Any:
        return self._clients[(connection, "blob")]

    def queues(self, connection: str) -> Any:
        return self._clients[(connection, "queue")]

    def tables(self, connection: str) -> Any:
        return self._clients[(connection, "table")]

    async def close(self) -> None:
        for client in self._clients.values():
            try:
                await client.close()
            except Exception:  # noqa: BLE001, S110 - closing on the way out; nothing to save
                pass
        self._clients.clear()
        if self._azurite is not None:
            await asyncio.to_thread(self._azurite.stop)
            self._azurite = None
