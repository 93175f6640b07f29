"""Host secrets on Azure Storage: one blob per name under ``secrets/`` in the hub's container.

A blob, not a row, because a secret is read and written alone and its conditional writes
map directly onto blob conditions: create with ``If-None-Match: *``, replace with the ETag
read. The writes skip the ownership fence on purpose: they are compare-and-swaps, safe
between a host, its standby and the ``keys`` command (which opens the hub read-only), and
a secret is no part of an instance's state that a stale owner could corrupt. A response
lost after a write that applied makes the retried write report False; callers re-read and
recognise their own value (``durable_host/http/keys.py``).
"""

from __future__ import annotations

from typing import Any

from azure.core import MatchConditions
from azure.core.exceptions import HttpResponseError, ResourceExistsError, ResourceNotFoundError

from durable_host.store.azure.errors import status_of
from durable_host.store.azure.tables import HubTables

PREFIX = "secrets/"


class HubSecrets:
    def __init__(self, tables: HubTables) -> None:
        self.tables = tables

    def _blob(self, name: str) -> Any:  # the SDK's blob client
        return self.tables.container.get_blob_client(PREFIX + name)

    async def _read(self, name: str) -> tuple[str, str] | None:
        """The text and ETag of a secret, None if there is none (or no container yet)."""
        try:
            stream = await self._blob(name).download_blob()
            data = await stream.readall()
        except ResourceNotFoundError:
            return None
        return data.decode(), str(stream.properties.etag)

    async def get(self, name: str) -> str | None:
        found = await self.tables.retry("read a host secret", lambda: self._read(name), write=False)
        return None if found is None else found[0]

    async def swap(self, name: str, expected: str | None, value: str) -> bool:
        async def attempt() -> bool:
            current = await self._read(name)
            if (None if current is None else current[0]) != expected:
                return False
            blob = self._blob(name)
            try:
                if current is None:
                    await self._create(blob, value)
                else:
                    await blob.upload_blob(
                        value.encode(),
                        overwrite=True,
                        etag=current[1],
                        match_condition=MatchConditions.IfNotModified,
                    )
            except ResourceExistsError:
                return False
            except HttpResponseError as exc:
                if status_of(exc) == 412:
                    return False
                raise
            return True

        return await self.tables.retry("write a host secret", attempt, write=False)

    async def _create(self, blob: Any, value: str) -> None:
        try:
            await blob.upload_blob(value.encode(), overwrite=False)
        except ResourceNotFoundError:
            # A hub opened read-only before any host created it has no container yet.
            try:
                await self.tables.container.create_container()
            except ResourceExistsError:
                pass
            await blob.upload_blob(value.encode(), overwrite=False)
