"""The task hub's table and blob container, reached through retries and the ownership fence.

``HubTables`` owns the SDK clients and is the only place requests are sent. Every request
goes through ``retry``:

* a write first checks that the hub lease is still provably held (``HubLease.check``);
* transient failures (connection refused or reset, timeouts, 408/429/5xx) are retried
  with exponential back-off (50 ms doubling to 2 s, jittered) for up to
  ``retry_seconds``, then ``StoreUnavailableError``; an outage is logged at most every
  10 s;
* at most ``PARALLEL`` requests are in flight at once.

On top of it sit the primitives the store is built from: queries (every page), point
reads, idempotent upserts and transactions, deletes that tolerate rows already gone, and
texts that move to a blob when they are too large for a property (blob names are never
reused, so a blob written by an aborted attempt is never mistaken for a committed one).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import random
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

from azure.core import MatchConditions
from azure.core.exceptions import (
    AzureError,
    HttpResponseError,
    ResourceExistsError,
    ResourceNotFoundError,
)
from azure.data.tables import UpdateMode

from durable_host.store.azure.codec import (
    ATTEMPTS_ROW,
    BATCH_OPS,
    HEAD_ROW,
    INLINE_LIMIT,
    Head,
    chunks,
    payload_blob_dir,
)
from durable_host.store.azure.errors import (
    AzureStoreError,
    HubLeaseLostError,
    StoreUnavailableError,
    is_transient,
    status_of,
)
from durable_host.store.azure.faults import LostResponses
from durable_host.store.azure.lease import HubLease
from functions_connections import StorageConnection, blob_service, table_service

T = TypeVar("T")
log = logging.getLogger("durable_host.store.azure")

PARALLEL = 32  # requests in flight at once for staging and releasing
Operation = tuple[Any, ...]  # one operation of an entity-group transaction


class HubTables:
    """Requests to one task hub's table and container (see the module docstring)."""

    def __init__(self, *, retry_seconds: float, writer: str) -> None:
        self.retry_seconds = retry_seconds
        self.writer = writer  # the ``W`` of every row this process writes
        self.faults = LostResponses.from_environment()
        self.lease: HubLease | None = None  # None: opened read-only, writes fail
        self.round_trips = 0  # storage requests sent, for /admin/host/metrics and bench/
        # Recent queries (filter, parameters), newest last: tests check what discovery reads.
        self.queries: collections.deque[tuple[str, dict[str, Any]]] = collections.deque(maxlen=1000)
        self.table_name = ""
        self.table: Any = None
        self.index: Any = None  # the hub's index table (``index.py``): small, never history
        self.index_name = ""
        self.container: Any = None
        self._tables: Any = None
        self._blobs: Any = None
        self._in_flight = asyncio.Semaphore(PARALLEL)
        self._outage_logged = 0.0
        self._background: set[asyncio.Task[Any]] = set()

    # --- lifecycle ----------------------------------------------------------------------

    def connect(
        self, connection: str | StorageConnection, table_name: str, container_name: str
    ) -> None:
        """Build the clients (no request yet); ``ConnectionSettingError`` for a bad setting."""
        options: dict[str, Any] = {
            "retry_total": 0,
            "connection_timeout": 10,
            "read_timeout": 30,
            "raw_request_hook": self._count_round_trip,
        }
        self._tables = table_service(connection, aio=True, **options)
        self._blobs = blob_service(connection, aio=True, **options)
        self.table_name = table_name
        self.table = self._tables.get_table_client(table_name)
        self.index_name = table_name + "Index"
        self.index = self._tables.get_table_client(self.index_name)
        self.container = self._blobs.get_container_client(container_name)

    def _count_round_trip(self, _request: Any) -> None:
        self.round_trips += 1

    async def create(self) -> None:
        """Create the table and the container unless they exist."""
        await self.retry("create the table", self._create_table, write=False)
        await self.retry("create the container", self._create_container, write=False)

    async def _create_table(self) -> None:
        await self._tables.create_table_if_not_exists(self.table_name)
        await self._tables.create_table_if_not_exists(self.index_name)

    async def _create_container(self) -> None:
        try:
            await self.container.create_container()
        except ResourceExistsError:
            pass

    async def close(self) -> None:
        """Cancel background work, give the lease back, close the clients."""
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        if self.lease is not None:
            await self.lease.close()
        for client in (self.table, self.index, self._tables, self.container, self._blobs):
            if client is not None:
                await client.close()

    def spawn(self, coro: Awaitable[Any]) -> None:
        """Run cleanup in the background; ``close`` cancels what is still running."""
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # --- retries and fencing ------------------------------------------------------------

    async def retry(self, what: str, attempt: Callable[[], Awaitable[T]], *, write: bool) -> T:
        """Run ``attempt`` until it succeeds, fails for good, or the retry budget is spent."""
        deadline = time.monotonic() + self.retry_seconds
        delay = 0.05
        while True:
            try:
                if write:
                    if self.lease is None:
                        raise AzureStoreError("this store was opened read-only")
                    await self.lease.check()
                async with self._in_flight:
                    self.faults.refuse("request")
                    return await attempt()
            except AzureError as exc:
                if not is_transient(exc):
                    raise
                if time.monotonic() >= deadline:
                    waited = f"{self.retry_seconds:.0f}s"
                    raise StoreUnavailableError(
                        f"Azure Storage did not answer ({what}) for {waited}: {exc}"
                    ) from exc
                self._log_outage(what, exc)
                await asyncio.sleep(delay * (0.5 + random.random()))
                delay = min(delay * 2, 2.0)

    def _log_outage(self, what: str, exc: BaseException) -> None:
        now = time.monotonic()
        if now - self._outage_logged > 10.0:
            self._outage_logged = now
            log.warning(
                "Azure Storage is not answering (%s); retrying with back-off: %s", what, exc
            )

    def check_epoch(self, head: Head | None) -> None:
        """Step back if a newer owner wrote ``head``: call on every head read before a write."""
        if self.lease is None:
            return  # read-only: nothing to fence
        if head is not None and head.epoch > self.lease.epoch:
            self.lease.lose(
                f"a newer owner (epoch {head.epoch}) has written to the task hub"
                f" this host owned as epoch {self.lease.epoch}"
            )
            raise HubLeaseLostError(self.lease.lost or "")

    # --- reads --------------------------------------------------------------------------

    async def query(
        self,
        flt: str,
        params: dict[str, Any],
        select: list[str] | None = None,
        *,
        table: Any = None,
        top: int | None = None,
    ) -> list[Any]:
        """Every page of a filtered query (of the hub table unless ``table`` is given), or
        its first ``top`` rows (in key order). The SDK substitutes ``@name`` parameters only
        in words separated by single spaces, hence the spaced parentheses in our filters."""
        client = self.table if table is None else table
        self.queries.append((flt, params))

        async def attempt() -> list[Any]:
            pages = client.query_entities(
                flt, parameters=params, select=select, results_per_page=top
            )
            found = []
            async for entity in pages:
                found.append(entity)
                if top is not None and len(found) >= top:
                    break
            return found

        return await self.retry("query", attempt, write=False)

    async def query_rows(
        self, partition: str, low: str, high: str, select: list[str] | None = None
    ) -> list[Any]:
        """The rows of one partition with ``low <= RowKey < high``."""
        return await self.query(
            "PartitionKey eq @pk and RowKey ge @lo and RowKey lt @hi",
            {"pk": partition, "lo": low, "hi": high},
            select=select,
        )

    async def read_partition(
        self, partition: str, low: str, high: str
    ) -> tuple[Head | None, Any, list[Any]]:
        """The head row, the attempts row and the rows with ``low <= RowKey < high``, in
        one query."""
        rows = await self.query(
            "PartitionKey eq @pk and ( RowKey eq @head or RowKey eq @att"
            " or ( RowKey ge @lo and RowKey lt @hi ) )",
            {"pk": partition, "head": HEAD_ROW, "att": ATTEMPTS_ROW, "lo": low, "hi": high},
        )
        head = next((Head.from_entity(r) for r in rows if r["RowKey"] == HEAD_ROW), None)
        attempts = next((r for r in rows if r["RowKey"] == ATTEMPTS_ROW), None)
        return head, attempts, [r for r in rows if r["RowKey"] not in (HEAD_ROW, ATTEMPTS_ROW)]

    async def read_head(self, partition: str) -> Head | None:
        async def attempt() -> Head | None:
            try:
                return Head.from_entity(await self.table.get_entity(partition, HEAD_ROW))
            except ResourceNotFoundError:
                return None

        return await self.retry("read an instance", attempt, write=False)

    async def read_row(self, partition: str, row_key: str, *, table: Any = None) -> Any:
        client = self.table if table is None else table

        async def attempt() -> Any:
            try:
                return await client.get_entity(partition, row_key)
            except ResourceNotFoundError:
                return None

        return await self.retry("read a row", attempt, write=False)

    async def nonce_of(self, partition: str, row_key: str) -> str | None:
        """The nonce ``N`` of a row, read inside a retry attempt (None: no such row)."""
        try:
            found = await self.table.get_entity(partition, row_key)
        except ResourceNotFoundError:
            return None
        return found.get("N")

    # --- writes -------------------------------------------------------------------------

    async def upsert_staged(self, row: dict[str, Any]) -> None:
        """Write a staged row into another partition (invisible until its commit)."""

        async def attempt() -> None:
            await self.table.upsert_entity(row, mode=UpdateMode.REPLACE)
            self.faults.hit("stage")

        await self.retry("stage a row", attempt, write=True)

    async def transact(self, ops: list[Operation]) -> None:
        """One idempotent transaction (upserts, deletes of rows known to exist)."""
        await self.retry("write a batch", lambda: self.table.submit_transaction(ops), write=True)

    async def delete_row(self, partition: str, row_key: str, etag: str | None = None) -> bool:
        """Delete a row (if unchanged since ``etag`` was read); False if gone or changed."""

        async def attempt() -> bool:
            try:
                if etag is None:
                    await self.table.delete_entity(partition, row_key)
                else:
                    await self.table.delete_entity(
                        partition, row_key, etag=etag, match_condition=MatchConditions.IfNotModified
                    )
                return True
            except ResourceNotFoundError:
                return False
            except HttpResponseError as exc:
                if status_of(exc) == 412:
                    return False
                raise

        return await self.retry("delete a row", attempt, write=True)

    async def delete_rows(self, partition: str, row_keys: Iterable[str]) -> None:
        """Delete rows that may already be gone: batches, falling back to single deletes."""
        keys = sorted(set(row_keys))
        for chunk in chunks(keys, BATCH_OPS):
            ops = [("delete", {"PartitionKey": partition, "RowKey": rk}) for rk in chunk]
            try:
                await self.transact(ops)
            except HttpResponseError as exc:
                if status_of(exc) != 404:
                    raise
                await asyncio.gather(*(self.delete_row(partition, rk) for rk in chunk))

    # --- texts and their blobs ----------------------------------------------------------

    async def put_text(self, row: dict[str, Any], name: str, text: str | None) -> None:
        """Set a text property inline, or in a blob when it is too large for a property."""
        row.pop(name, None)
        row.pop(name + "Blob", None)
        if text is None:
            return
        data = text.encode()
        if len(data) <= INLINE_LIMIT:
            row[name] = text
            return
        blob = f"{payload_blob_dir(row['PartitionKey'])}/{row['RowKey']}/{name}/{uuid.uuid4().hex}"

        async def attempt() -> None:
            await self.container.upload_blob(blob, data, overwrite=True)

        await self.retry("upload a payload", attempt, write=True)
        row[name + "Blob"] = blob

    async def get_text(self, row: dict[str, Any], name: str) -> str | None:
        if name in row:
            return str(row[name])
        blob = row.get(name + "Blob")
        if blob is None:
            return None

        async def attempt() -> bytes:
            stream = await self.container.download_blob(blob)
            return await stream.readall()

        return (await self.retry("download a payload", attempt, write=False)).decode()

    async def drop_blob(self, name: str) -> bool:
        """Delete one payload blob that no committed row names any more: one attempt, and
        True unless it failed (already gone counts as done). Never raises for storage
        errors: the caller has committed already, and a blob left behind is only garbage."""
        try:
            if self.lease is None:
                return False
            await self.lease.check()
            async with self._in_flight:
                self.faults.refuse("request")
                await self.container.delete_blob(name)
        except ResourceNotFoundError:
            return True
        except (AzureError, AzureStoreError) as exc:
            log.info("payload blob %s left behind: %s", name, exc)
            return False
        return True

    async def delete_blobs(self, prefix: str) -> None:
        async def attempt() -> None:
            names = [b.name async for b in self.container.list_blobs(name_starts_with=prefix)]
            for name in names:
                try:
                    await self.container.delete_blob(name)
                except ResourceNotFoundError:
                    pass

        await self.retry("delete payloads", attempt, write=True)
