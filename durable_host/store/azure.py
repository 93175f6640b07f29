"""The Azure Storage task hub: one table and one blob container per hub, async SDK clients.

Same observable semantics as the SQLite store (``store/base.py`` states the contract);
``docs/azure-storage.md`` explains the design and the crash analysis of every commit step.

Layout. Table ``<hub>HostState`` holds one partition per instance (PartitionKey = the
escaped instance id), so everything one commit touches in its own instance can change in
one entity-group transaction:

* ``!``              the head row: the instance record *and* the commit record (``Seq``,
                     ``Tok`` = token of the last commit, ``Gen``/``Count`` = which history
                     rows are visible, ``Epoch`` of the writer, ``Pending`` post-commit work);
* ``h<gen>.<seq>``   one history event each; only rows of the head's ``Gen`` with
                     ``seq < Count`` exist for readers;
* ``i<id>``          inbox messages in id order, ``VisibleAt`` for durable timers;
* ``w<id>``          activity work items with their ``DequeueCount``;
* ``a``              attempts at the next episode (``begin_attempt``; a commit resets it);
* ``o<seq>.<tok>.n`` outbox index: which staged rows a commit must release.

Container ``<hub>-hoststate`` holds the hub's ownership lease blob and payloads too large
for a table property (above 30,000 UTF-8 bytes; Azure's limit is 64 KiB per property).

Commit protocol. Every write to a head row is conditional on the ETag read at the start
of the episode and is the one commit point. An episode that fits one transaction (100
operations, 4 MiB) writes head, history rows, its own new inbox rows and work items and
its inbox deletions in one transaction. Messages for *other* instances cannot join that
transaction: they are staged before it, marked ``Tok``/``Src``/``SrcSeq``, and readers
show a staged row only once the sender's head carries that token and sequence; after the
commit the sender releases them (clears ``Tok``) before it commits again. A larger
episode stages everything (a fresh history generation with the whole history, marked
work items and messages) and commits with the single head write. Nothing staged is
visible before the commit point, so an interrupted commit leaves nothing visible.

Ambiguity. A write whose response is lost (timeout, reset, injected fault) is retried; a
retry rejected by its own condition is resolved by reading the head: if it carries this
commit's token, the commit happened. Nothing is ever applied twice.

Fencing. ``open`` takes a blob lease on the hub (a second host waits as a standby and
takes over when the lease lapses) and bumps an epoch stored on the lease blob; every
write first checks that the lease is still provably held (renewing it when in doubt) and
every head read checks that no newer epoch wrote it. A host that loses its lease raises
``HubLeaseLostError`` from then on and calls ``on_lost`` once.

Transient failures (connection refused or reset, timeouts, 408/429/5xx) are retried with
exponential back-off for up to ``retry_seconds``; then ``StoreUnavailableError``. Azure
SDK exceptions never leave this module.

Work written by other processes is found by ``poll`` (the engine calls it in a loop),
which waits 0.2 s doubling to 10 s while nothing foreign turns up; work this process
submits is dispatched in-process at once and never waits for a poll.

Settings: ``DURABLE_HOST_LEASE_SECONDS`` (15-60, default 15),
``DURABLE_HOST_AZURE_RETRY_SECONDS`` (default 60). Tests:
``DURABLE_HOST_AZURE_FAULTS`` loses chosen responses (``_Faults``), and the SIGKILL
point ``store.before_commit`` of ``DURABLE_HOST_FAULTS`` fires before each operation's
final write (for a commit: after staging, before the commit point), as in SQLite.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import logging
import os
import random
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from azure.core import MatchConditions
from azure.core.exceptions import (
    AzureError,
    HttpResponseError,
    ResourceExistsError,
    ResourceNotFoundError,
    ServiceRequestError,
    ServiceResponseError,
)
from azure.data.tables import UpdateMode
from azure.data.tables.aio import TableServiceClient
from azure.storage.blob.aio import BlobLeaseClient, BlobServiceClient

from durable_host import azurite, faults
from durable_host import history as h
from durable_host.records import Episode
from durable_host.store.base import (
    ActivityWork,
    CorruptHistoryError,
    EntityCommit,
    InstanceExistsError,
    InstanceRecord,
    Query,
    QueryPage,
    StoreLockedError,
)

T = TypeVar("T")
log = logging.getLogger("durable_host.store.azure")
# The SDK logs every request and response at INFO; the host's own log would drown in them.
logging.getLogger("azure.core.pipeline.policies.http_logging_policy").setLevel(logging.WARNING)

HEAD = "!"
ATTEMPTS = "a"  # attempts at the instance's next episode (poison detection)
INLINE_LIMIT = 30_000  # UTF-8 bytes; a UTF-16 string property holds at most 64 KiB
BATCH_OPS = 100  # entity-group transaction limits: 100 operations, 4 MiB
BATCH_BYTES = 3_000_000
ROW_OVERHEAD = 300
PARALLEL = 32  # requests in flight at once for staging and releasing
LEASE_MARGIN = 3.0  # seconds of a lease we never rely on (clock rate, request latency)
STANDBY_POLL = 2.0
POLL_MIN, POLL_MAX = 0.2, 10.0
STALE_SECONDS = 30.0  # own inbox rows older than this are re-announced by ``poll``
TERMINAL_OUTPUT = ("Completed", "Failed", "Terminated")
_TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})


# --- errors -------------------------------------------------------------------------------


class AzureStoreError(Exception):
    """Root of the Azure store's own errors."""


class StoreUnavailableError(AzureStoreError, ConnectionError):
    """Azure Storage did not answer within the retry budget."""


class StoreConflictError(AzureStoreError):
    """Another writer changed the instance since it was read; re-run the episode."""


class HubLeaseLostError(StoreLockedError):
    """This host no longer owns the task hub; it must not write."""


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, (ServiceRequestError, ServiceResponseError)):
        return True
    return isinstance(exc, HttpResponseError) and exc.status_code in _TRANSIENT_STATUS


def _status(exc: BaseException) -> int | None:
    return getattr(exc, "status_code", None)


def _edge(fn: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T]]:
    """Translate any Azure SDK error that got this far into the store's own errors."""

    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> T:
        try:
            return await fn(*args, **kwargs)
        except AzureError as exc:
            raise AzureStoreError(f"Azure Storage rejected {fn.__name__}: {exc}") from exc

    return wrapper


# --- keys and ids ---------------------------------------------------------------------------

_KEY_UNSAFE = frozenset("/\\#?%")


def _pk(instance_id: str) -> str:
    """Instance id -> PartitionKey: table keys forbid / \\ # ? and control characters."""
    return "".join(
        f"%{ord(c):02X}" if c in _KEY_UNSAFE or ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F else c
        for c in instance_id
    )


def _unpk(pk: str) -> str:
    if "%" not in pk:
        return pk
    out, i = [], 0
    while i < len(pk):
        if pk[i] == "%":
            out.append(chr(int(pk[i + 1 : i + 3], 16)))
            i += 3
        else:
            out.append(pk[i])
            i += 1
    return "".join(out)


def _rk_inbox(message_id: int) -> str:
    return f"i{message_id:020d}"


def _rk_work(work_id: int) -> str:
    return f"w{work_id:020d}"


def _rk_history(gen: str, seq: int) -> str:
    return f"h{gen}.{seq:08d}"


def _new_gen() -> str:
    return uuid.uuid4().hex[:12]


def _blob_dir(pk: str) -> str:
    return "p/" + hashlib.sha256(pk.encode()).hexdigest()[:24]


class _Ids:
    """Message and work ids: microseconds * 1000 + a random low part, increasing per process.

    Ids order the inbox (arrival order) and must not collide between processes; a
    collision is detected by the conditional insert and retried with a new id.
    """

    def __init__(self) -> None:
        self._last = 0

    def next(self) -> int:
        candidate = time.time_ns() // 1000 * 1000 + random.randrange(1000)
        self._last = max(self._last + 1, candidate)
        return self._last


def _process_identity() -> str:
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


def _dead_here(owner: str) -> bool:
    parts = owner.split("|")
    mine = _process_identity().split("|")
    if len(parts) < 4 or not parts[1] or not parts[2] or parts[:3] != mine[:3]:
        return False  # another machine, or one we cannot judge: wait for the lease to expire
    stat = _read(f"/proc/{parts[3]}/stat")
    if not stat:
        return True
    return stat.rpartition(")")[2].split()[0] in ("Z", "X")  # a zombie is dead too


def _id_seconds(message_id: int) -> float:
    return message_id / 1_000_000_000


def _utc_now() -> str:
    return h.format_time(datetime.now(UTC))


# --- fault injection ----------------------------------------------------------------------


class _Faults:
    """``DURABLE_HOST_AZURE_FAULTS="point[@n],..."``: after the n-th successful write at
    ``point`` (``commit``, ``complete``, ``send``, ``stage``), raise as if the response had
    been lost on the way back. Tests use it to prove that retried writes apply once.
    """

    def __init__(self, spec: str) -> None:
        self._plan: dict[str, set[int]] = {}
        self._seen: dict[str, int] = {}
        for item in filter(None, (s.strip() for s in spec.split(","))):
            point, _, count = item.partition("@")
            self._plan.setdefault(point, set()).add(int(count or 1))

    def hit(self, point: str) -> None:
        if point not in self._plan:
            return
        self._seen[point] = self._seen.get(point, 0) + 1
        if self._seen[point] in self._plan[point]:
            log.warning("fault injection: response of %s@%d lost", point, self._seen[point])
            raise ServiceResponseError(f"fault injection: response of {point} lost")


# --- the ownership lease ------------------------------------------------------------------


class _HubLease:
    """A blob lease on ``<container>/owner`` plus an epoch in the blob's metadata.

    ``valid_until`` is a monotonic deadline computed from the moment a renew request was
    *sent*, minus a margin, so it never outlives the lease the service granted.
    """

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
            if exc.status_code not in (409, 412) and not _transient(exc):
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
        if not holder.get("lease") or not _dead_here(holder.get("owner", "")):
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
                if _transient(exc):
                    raise
                code = exc.error_code or exc.status_code
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


# --- rows -----------------------------------------------------------------------------------


@dataclass
class _Head:
    """The head row as read: instance record plus commit record."""

    raw: dict[str, Any]
    etag: str

    @property
    def seq(self) -> int:
        return int(self.raw.get("Seq", 0))

    @property
    def tok(self) -> str:
        return str(self.raw.get("Tok", ""))

    @property
    def gen(self) -> str:
        return str(self.raw.get("Gen", ""))

    @property
    def count(self) -> int:
        return int(self.raw.get("Count", 0))

    @property
    def epoch(self) -> int:
        return int(self.raw.get("Epoch", 0))

    @property
    def floor(self) -> int:
        return int(self.raw.get("Floor", "0"))

    @property
    def pending(self) -> str:
        return str(self.raw.get("Pending", ""))


def _head(entity: Any) -> _Head:
    return _Head(dict(entity), entity.metadata["etag"])


def _row_size(row: dict[str, Any]) -> int:
    return len(json.dumps(row, default=str)) + ROW_OVERHEAD


@dataclass
class _Commit:
    """Everything one commit writes, before it is planned into requests."""

    pk: str
    head: _Head | None
    new: dict[str, Any]  # the complete new head row
    events: list[dict[str, Any]]  # history events to append (to a new execution if fresh)
    fresh_history: bool
    local: list[dict[str, Any]]  # rows for this partition: work items, own messages
    remote: list[dict[str, Any]]  # inbox rows for other partitions
    deletes: list[int]  # consumed inbox ids
    token: str = ""
    seq: int = 0


# --- the store ------------------------------------------------------------------------------


class AzureStore:
    """Store port on Azure Storage tables and blobs (see module docstring)."""

    def __init__(
        self,
        connection: str,
        hub: str,
        *,
        azurite_location: Path | None = None,
        on_lost: Callable[[str], None] | None = None,
        lease_seconds: int | None = None,
        retry_seconds: float | None = None,
        read_only: bool = False,
    ) -> None:
        """``read_only``: inspect a hub without taking its lease (tools, tests); writes fail."""
        self.connection = connection
        self.read_only = read_only
        self.hub = hub
        self.table_name = f"{hub}HostState"
        self.container_name = f"{hub.lower()}-hoststate"
        self.azurite_location = azurite_location
        self.lease_seconds = lease_seconds or int(
            os.environ.get("DURABLE_HOST_LEASE_SECONDS", "15")
        )
        self.retry_seconds = retry_seconds or float(
            os.environ.get("DURABLE_HOST_AZURE_RETRY_SECONDS", "60")
        )
        self._on_lost = on_lost
        self._writer = f"{_process_identity()}|{uuid.uuid4().hex[:8]}"
        self._ids = _Ids()
        self._faults = _Faults(os.environ.get("DURABLE_HOST_AZURE_FAULTS", ""))
        self._azurite: azurite.Azurite | None = None
        self._tables: Any = None
        self._table: Any = None
        self._blobs: Any = None
        self._container: Any = None
        self._lease: _HubLease | None = None
        self._io = asyncio.Semaphore(PARALLEL)
        self._seen: dict[str, _Head | None] = {}  # head as read by the episode's fetch
        self._finished: dict[str, str] = {}  # pk -> token whose post-commit work is done
        self._work_pk: dict[int, str] = {}
        self._attempts: dict[str, Any] = {}  # attempts row as read by the episode's fetch
        self._handed: set[int] = set()  # work ids given to the engine by this process
        self._background: set[asyncio.Task[Any]] = set()
        self._poll_delay = POLL_MIN
        self._outage_logged = 0.0
        self.round_trips = 0  # storage requests sent, for /admin/host/metrics and bench/

    def _count_round_trip(self, _request: Any) -> None:
        self.round_trips += 1

    # --- lifecycle ----------------------------------------------------------------------

    async def open(self) -> None:
        if self.azurite_location is not None:
            try:
                self._azurite = await asyncio.to_thread(
                    azurite.ensure, self.connection, self.azurite_location
                )
            except azurite.AzuriteError as exc:
                raise StoreUnavailableError(str(exc)) from exc
        connection = azurite.resolve_setting(self.connection)
        options: dict[str, Any] = {
            "retry_total": 0,
            "connection_timeout": 10,
            "read_timeout": 30,
            "raw_request_hook": self._count_round_trip,
        }
        try:
            self._tables = TableServiceClient.from_connection_string(connection, **options)
            self._blobs = BlobServiceClient.from_connection_string(connection, **options)
        except ValueError as exc:
            raise StoreUnavailableError(
                f"AzureWebJobsStorage is not a valid connection string: {exc}"
            ) from exc
        self._table = self._tables.get_table_client(self.table_name)
        self._container = self._blobs.get_container_client(self.container_name)
        if self.read_only:
            return
        await self._retry("create the table", self._create_table, write=False)
        await self._retry("create the container", self._create_container, write=False)
        self._lease = _HubLease(
            self._container.get_blob_client("owner"),
            self.lease_seconds,
            self._writer,
            self._on_lost,
        )
        try:
            await self._lease.acquire(self.hub)
        except AzureError as exc:
            raise StoreUnavailableError(f"could not take the task hub lease: {exc}") from exc
        log.info(
            "owner of task hub %s (epoch %d) on table %s",
            self.hub,
            self._lease.epoch,
            self.table_name,
        )

    async def _create_table(self) -> None:
        await self._tables.create_table_if_not_exists(self.table_name)

    async def _create_container(self) -> None:
        try:
            await self._container.create_container()
        except ResourceExistsError:
            pass

    async def close(self) -> None:
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        if self._lease is not None:
            await self._lease.close()
        for client in (self._table, self._tables, self._container, self._blobs):
            if client is not None:
                await client.close()
        if self._azurite is not None:
            await asyncio.to_thread(self._azurite.stop)
            self._azurite = None

    # --- retries and fencing ------------------------------------------------------------

    async def _retry(self, what: str, attempt: Callable[[], Awaitable[T]], *, write: bool) -> T:
        deadline = time.monotonic() + self.retry_seconds
        delay = 0.05
        while True:
            try:
                if write:
                    if self._lease is None:
                        raise AzureStoreError("this store was opened read-only")
                    await self._lease.check()
                async with self._io:
                    return await attempt()
            except AzureError as exc:
                if not _transient(exc):
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

    def _check_epoch(self, head: _Head | None) -> None:
        if self._lease is None:
            return  # read-only: nothing to fence
        if head is not None and head.epoch > self._lease.epoch:
            self._lease.lose(
                f"a newer owner (epoch {head.epoch}) has written to the task hub"
                f" this host owned as epoch {self._lease.epoch}"
            )
            raise HubLeaseLostError(self._lease.lost or "")

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # --- table and blob primitives ------------------------------------------------------

    async def _query(
        self, flt: str, params: dict[str, Any], select: list[str] | None = None
    ) -> list[Any]:
        """Every page of a filtered query. The SDK substitutes ``@name`` parameters only in
        words separated by single spaces, hence the spaced parentheses in our filters."""

        async def attempt() -> list[Any]:
            pages = self._table.query_entities(flt, parameters=params, select=select)
            return [entity async for entity in pages]

        return await self._retry("query", attempt, write=False)

    async def _partition(self, pk: str, lo: str, hi: str) -> tuple[_Head | None, list[Any]]:
        """The head row and the rows with ``lo <= RowKey < hi``, in one query (the
        attempts row comes along and is remembered for ``begin_attempt``)."""
        rows = await self._query(
            "PartitionKey eq @pk and ( RowKey eq @head or RowKey eq @att"
            " or ( RowKey ge @lo and RowKey lt @hi ) )",
            {"pk": pk, "head": HEAD, "att": ATTEMPTS, "lo": lo, "hi": hi},
        )
        head = next((_head(r) for r in rows if r["RowKey"] == HEAD), None)
        attempts = next((r for r in rows if r["RowKey"] == ATTEMPTS), None)
        self._attempts[pk] = attempts
        return head, [r for r in rows if r["RowKey"] not in (HEAD, ATTEMPTS)]

    async def _read_head(self, pk: str) -> _Head | None:
        async def attempt() -> _Head | None:
            try:
                return _head(await self._table.get_entity(pk, HEAD))
            except ResourceNotFoundError:
                return None

        return await self._retry("read an instance", attempt, write=False)

    async def _upsert(self, row: dict[str, Any]) -> None:
        async def attempt() -> None:
            await self._table.upsert_entity(row, mode=UpdateMode.REPLACE)
            self._faults.hit("stage")

        await self._retry("stage a row", attempt, write=True)

    async def _transact(self, ops: list[tuple[Any, ...]]) -> None:
        """One idempotent transaction (upserts, deletes of rows known to exist)."""
        await self._retry("write a batch", lambda: self._table.submit_transaction(ops), write=True)

    async def _release_row(self, pk: str, rk: str) -> None:
        async def attempt() -> None:
            try:  # a merge never recreates a row its receiver already consumed
                await self._table.update_entity(
                    {"PartitionKey": pk, "RowKey": rk, "Tok": ""}, mode=UpdateMode.MERGE
                )
            except ResourceNotFoundError:
                pass

        await self._retry("release a staged row", attempt, write=True)

    async def _delete_row(self, pk: str, rk: str, etag: str | None = None) -> bool:
        async def attempt() -> bool:
            try:
                if etag is None:
                    await self._table.delete_entity(pk, rk)
                else:
                    await self._table.delete_entity(
                        pk, rk, etag=etag, match_condition=MatchConditions.IfNotModified
                    )
                return True
            except ResourceNotFoundError:
                return False
            except HttpResponseError as exc:
                if _status(exc) == 412:
                    return False
                raise

        return await self._retry("delete a row", attempt, write=True)

    async def _delete_rows(self, pk: str, row_keys: Iterable[str]) -> None:
        """Delete rows that may already be gone: batches, falling back to single deletes."""
        keys = sorted(set(row_keys))
        for chunk in _chunks(keys, BATCH_OPS):
            ops = [("delete", {"PartitionKey": pk, "RowKey": rk}) for rk in chunk]
            try:
                await self._transact(ops)
            except HttpResponseError as exc:
                if _status(exc) != 404:
                    raise
                await asyncio.gather(*(self._delete_row(pk, rk) for rk in chunk))

    async def _put_text(self, row: dict[str, Any], name: str, text: str | None) -> None:
        """Set a text property inline, or in a blob when it is too large for a property."""
        row.pop(name, None)
        row.pop(name + "Blob", None)
        if text is None:
            return
        data = text.encode()
        if len(data) <= INLINE_LIMIT:
            row[name] = text
            return
        blob = f"{_blob_dir(row['PartitionKey'])}/{row['RowKey']}/{name}/{uuid.uuid4().hex}"

        async def attempt() -> None:
            await self._container.upload_blob(blob, data, overwrite=True)

        await self._retry("upload a payload", attempt, write=True)
        row[name + "Blob"] = blob

    async def _get_text(self, row: dict[str, Any], name: str) -> str | None:
        if name in row:
            return str(row[name])
        blob = row.get(name + "Blob")
        if blob is None:
            return None

        async def attempt() -> bytes:
            stream = await self._container.download_blob(blob)
            return await stream.readall()

        return (await self._retry("download a payload", attempt, write=False)).decode()

    # --- row builders -------------------------------------------------------------------

    def _base_row(self, pk: str, rk: str) -> dict[str, Any]:
        return {"PartitionKey": pk, "RowKey": rk, "W": self._writer}

    async def _inbox_row(
        self, pk: str, message: dict[str, Any], visible_at: str | None = None
    ) -> tuple[int, dict[str, Any]]:
        message_id = self._ids.next()
        row = self._base_row(pk, _rk_inbox(message_id))
        if visible_at is not None:
            row["VisibleAt"] = visible_at
        await self._put_text(row, "M", json.dumps(message))
        return message_id, row

    async def _work_row(
        self, pk: str, payload: dict[str, Any]
    ) -> tuple[ActivityWork, dict[str, Any]]:
        work_id = self._ids.next()
        row = self._base_row(pk, _rk_work(work_id))
        row.update(
            ExecutionId=payload["execution_id"],
            TaskId=int(payload["task_id"]),
            Name=payload["name"],
            DequeueCount=1,  # handed at creation: the committing engine runs it at once
        )
        await self._put_text(row, "Input", payload["input_json"])
        work = ActivityWork(
            work_id,
            payload["instance_id"],
            payload["execution_id"],
            int(payload["task_id"]),
            payload["name"],
            payload["input_json"],
            1,
        )
        return work, row

    async def _history_row(
        self, pk: str, gen: str, seq: int, event: dict[str, Any]
    ) -> dict[str, Any]:
        row = {"PartitionKey": pk, "RowKey": _rk_history(gen, seq)}
        await self._put_text(row, "E", json.dumps(event))
        return row

    async def _record(self, pk: str, raw: dict[str, Any]) -> InstanceRecord:
        names = ("Input", "Output", "CustomStatus", "EntityState")
        texts = await asyncio.gather(*(self._get_text(raw, n) for n in names))
        return InstanceRecord(
            instance_id=_unpk(pk),
            name=str(raw.get("Name", "")),
            status=str(raw.get("Status", "")),
            execution_id=raw.get("ExecutionId") or None,
            version=raw.get("Version"),
            input_json=texts[0],
            output_json=texts[1],
            custom_status_json=texts[2],
            created_at=str(raw.get("CreatedAt", "")),
            updated_at=str(raw.get("UpdatedAt", "")),
            parent_instance_id=raw.get("ParentInstanceId") or None,
            entity_state=texts[3],
            entity_exists=bool(raw.get("EntityExists", False)),
        )

    # --- visibility of staged rows ------------------------------------------------------

    async def _visible(self, row: Any, heads: dict[str, _Head | None]) -> bool:
        """A staged row is visible once its sender's head carries its token and sequence.

        A staged row whose sender has committed that sequence (or a later one) with
        another token belongs to an aborted commit: it is deleted, conditionally on the
        ETag read, so a row released meanwhile survives. ``heads`` caches head rows by
        PartitionKey for one scan.
        """
        token = row.get("Tok") or ""
        if not token:
            return True
        src, src_seq = row["Src"], int(row["SrcSeq"])
        if src not in heads:
            heads[src] = await self._read_head(src)
        sender = heads[src]
        if sender is not None and sender.seq == src_seq and sender.tok == token:
            return True
        if sender is not None and sender.seq >= src_seq:
            self._spawn(self._delete_row(row["PartitionKey"], row["RowKey"], row.metadata["etag"]))
        return False

    # --- post-commit work -----------------------------------------------------------------

    async def _settle(self, pk: str, head: _Head | None) -> None:
        """Finish the last commit's post-commit work unless this process already did."""
        if head is not None and head.pending and self._finished.get(pk) != head.tok:
            await self._finish(pk, head)

    async def _finish(self, pk: str, head: _Head) -> None:
        """Idempotent: release staged rows, delete consumed messages, drop old generations."""
        flags = head.pending
        if "R" in flags:
            await self._release(pk, head)
        if "C" in flags:
            ids = json.loads(await self._get_text(head.raw, "Consumed") or "[]")
            await self._delete_rows(pk, [_rk_inbox(i) for i in ids])
        old_gen = str(head.raw.get("OldGen", ""))
        if "G" in flags and old_gen:
            rows = await self._query(
                "PartitionKey eq @pk and RowKey ge @lo and RowKey lt @hi",
                {"pk": pk, "lo": f"h{old_gen}.", "hi": f"h{old_gen}/"},
                select=["RowKey"],
            )
            await self._delete_rows(pk, [r["RowKey"] for r in rows])
        if "F" in flags:
            rows = await self._query(
                "PartitionKey eq @pk and RowKey ge @lo and RowKey lt @hi",
                {"pk": pk, "lo": "i", "hi": _rk_inbox(head.floor)},
                select=["RowKey"],
            )
            await self._delete_rows(pk, [r["RowKey"] for r in rows])
        self._finished[pk] = head.tok

    async def _release(self, pk: str, head: _Head) -> None:
        """Clear ``Tok`` on every row the head's commit staged, then drop its index rows."""
        index = await self._query(
            "PartitionKey eq @pk and RowKey ge @lo and RowKey lt @hi",
            {"pk": pk, "lo": "o", "hi": "p"},
        )
        for row in index:
            seq_text, token, _ = row["RowKey"][1:].split(".")
            if int(seq_text) > head.seq:
                continue  # a commit attempt still in flight elsewhere
            if token == head.tok:
                refs = json.loads(await self._get_text(row, "Refs") or "[]")
                await asyncio.gather(*(self._release_row(p, r) for p, r in refs))
            # Index rows of other tokens belong to aborted attempts (or to released commits
            # whose index deletion was interrupted); the rows they name are left to readers,
            # who drop aborted ones conditionally (``_visible``).
            await self._delete_row(pk, row["RowKey"])

    # --- instances ------------------------------------------------------------------------

    @_edge
    async def create_instance(
        self,
        record: InstanceRecord,
        start_message: dict[str, Any],
        overridable: tuple[str, ...],
        visible_at: str | None = None,
    ) -> None:
        pk = _pk(record.instance_id)
        for _ in range(5):
            head = await self._read_head(pk)
            self._check_epoch(head)
            await self._settle(pk, head)
            if head is not None and head.raw.get("Status") not in overridable:
                raise InstanceExistsError(record.instance_id, str(head.raw.get("Status")))
            message_id, start_row = await self._inbox_row(pk, start_message, visible_at)
            new = await self._created_head(pk, record, message_id)
            commit = _Commit(pk, head, new, [], True, [start_row], [], [])
            self._stamp(commit)
            if head is not None:  # a restarted id starts clean: old history and messages go
                commit.new["Pending"] = "GF" if "OldGen" in commit.new else "F"
            try:
                faults.hit("store.before_commit")
                await self._commit_point(commit, [("create", start_row)])
            except StoreConflictError:
                continue  # changed since read: check the status again
            await self._after_commit(commit)
            return
        raise StoreConflictError(
            f"instance {record.instance_id} kept changing while it was created"
        )

    async def _created_head(self, pk: str, record: InstanceRecord, floor: int) -> dict[str, Any]:
        new: dict[str, Any] = {
            "PartitionKey": pk,
            "RowKey": HEAD,
            "Name": record.name,
            "Status": record.status,
            "CreatedAt": record.created_at,
            "UpdatedAt": record.updated_at,
            "Gen": _new_gen(),
            "Count": 0,
            "Floor": f"{floor:020d}",
        }
        for key, value in (
            ("ExecutionId", record.execution_id),
            ("Version", record.version),
            ("ParentInstanceId", record.parent_instance_id),
        ):
            if value is not None:
                new[key] = value
        await self._put_text(new, "Input", record.input_json)
        return new

    @_edge
    async def send(
        self, instance_id: str, message: dict[str, Any], now: str, status: str | None = None
    ) -> None:
        """Add a message; with ``status``, set the runtime status in the same transaction."""
        pk = _pk(instance_id)
        for _ in range(5):
            head = await self._read_head(pk) if status is not None else None
            self._check_epoch(head)
            _, row = await self._inbox_row(pk, message)
            row["N"] = uuid.uuid4().hex
            faults.hit("store.before_commit")
            if head is None:
                attempt = functools.partial(self._insert_once, row, "send")
            else:
                new = {**head.raw, "Status": status, "UpdatedAt": now}
                attempt = functools.partial(self._send_with_status, head, new, row)
            if await self._retry("send a message", attempt, write=True):
                return
        raise StoreConflictError(f"could not send to {instance_id}: it kept changing")

    async def _send_with_status(
        self, head: _Head, new: dict[str, Any], row: dict[str, Any]
    ) -> bool:
        """True once the message is in (this call's or a lost-response retry's); False: retry."""
        ops = [
            (
                "update",
                new,
                {
                    "mode": UpdateMode.REPLACE,
                    "etag": head.etag,
                    "match_condition": MatchConditions.IfNotModified,
                },
            ),
            ("create", row),
        ]
        try:
            await self._table.submit_transaction(ops)
        except HttpResponseError as exc:
            if _transient(exc):
                raise
            try:
                found = await self._table.get_entity(row["PartitionKey"], row["RowKey"])
                return bool(found.get("N") == row["N"])
            except ResourceNotFoundError:
                return False  # the head changed since it was read: read it again
        self._faults.hit("send")
        return True

    async def _insert_once(self, row: dict[str, Any], point: str) -> bool:
        """Insert a row carrying a nonce ``N``; True once it is in the table (exactly once)."""
        try:
            await self._table.create_entity(row)
        except ResourceExistsError:
            try:
                found = await self._table.get_entity(row["PartitionKey"], row["RowKey"])
            except ResourceNotFoundError:
                return False
            return bool(found.get("N") == row["N"])  # else an id collision: try another
        self._faults.hit(point)
        return True

    @_edge
    async def get_instance(self, instance_id: str) -> InstanceRecord | None:
        pk = _pk(instance_id)
        head = await self._read_head(pk)
        return None if head is None else await self._record(pk, head.raw)

    @_edge
    async def get_history(self, instance_id: str) -> list[dict[str, Any]]:
        pk = _pk(instance_id)
        for _ in range(5):
            head, rows = await self._partition(pk, "h", "i")
            if head is None or not head.gen:
                return []
            events = await self._history_of(head, rows)
            if events is not None:
                return events
        raise StoreConflictError(f"the history of {instance_id} kept changing while it was read")

    async def _history_of(self, head: _Head, rows: list[Any]) -> list[dict[str, Any]] | None:
        """The head's visible history from ``rows``; None if rows are missing (re-read)."""
        prefix = f"h{head.gen}."
        mine = sorted(
            (r for r in rows if r["RowKey"].startswith(prefix)), key=lambda r: r["RowKey"]
        )[: head.count]
        if len(mine) < head.count:
            return None
        texts = await asyncio.gather(*(self._get_text(r, "E") for r in mine))
        events = []
        for seq, text in enumerate(texts):
            try:
                events.append(json.loads(text or ""))
            except ValueError as exc:
                raise CorruptHistoryError(_unpk(head.raw["PartitionKey"]), seq, str(exc)) from exc
        return events

    async def _current_history(self, pk: str, head: _Head) -> list[dict[str, Any]]:
        rows = await self._query(
            "PartitionKey eq @pk and RowKey ge @lo and RowKey lt @hi",
            {"pk": pk, "lo": f"h{head.gen}.", "hi": f"h{head.gen}/"},
        )
        events = await self._history_of(head, rows)
        if events is None:
            raise StoreConflictError("history rows vanished while the episode ran")
        return events

    @_edge
    async def fetch_messages(
        self, instance_id: str, now: str, limit: int = 1000
    ) -> list[tuple[int, dict[str, Any]]]:
        pk = _pk(instance_id)
        head, rows = await self._partition(pk, "i", "j")
        self._check_epoch(head)
        await self._settle(pk, head)
        consumed: set[int] = set()
        if head is not None and "C" in head.pending:
            consumed = set(json.loads(await self._get_text(head.raw, "Consumed") or "[]"))
        floor = head.floor if head is not None else 0
        picked: list[tuple[int, Any]] = []
        heads: dict[str, _Head | None] = {pk: head}
        for row in sorted(rows, key=lambda r: r["RowKey"]):
            message_id = int(row["RowKey"][1:])
            if message_id < floor or message_id in consumed:
                continue
            if row.get("VisibleAt") and row["VisibleAt"] > now:
                continue
            if await self._visible(row, heads):
                picked.append((message_id, row))
                if len(picked) >= limit:
                    break
        self._seen[pk] = head
        if not picked:
            self._seen.pop(pk, None)
        texts = await asyncio.gather(*(self._get_text(r, "M") for _, r in picked))
        return [(i, _decode_message(t or "")) for (i, _), t in zip(picked, texts, strict=True)]

    # --- commits ----------------------------------------------------------------------------

    async def _head_for_commit(self, pk: str) -> _Head | None:
        if pk in self._seen:
            head = self._seen.pop(pk)
        else:
            head = await self._read_head(pk)
        self._check_epoch(head)
        await self._settle(pk, head)
        return head

    @_edge
    async def commit_episode(
        self, instance_id: str, episode: Episode, now: str
    ) -> list[ActivityWork]:
        pk = _pk(instance_id)
        head = await self._head_for_commit(pk)
        if head is None and not episode.replace_history:
            # Messages for an instance that does not exist are dropped; nothing else changes.
            faults.hit("store.before_commit")
            await self._delete_rows(pk, [_rk_inbox(i) for i in episode.consumed])
            await self._delete_row(pk, ATTEMPTS)
            return []
        new = await self._episode_head(pk, head, episode, now)
        created, local, remote = await self._outbox(pk, episode)
        fresh = episode.replace_history or episode.rewrite_history or head is None
        commit = _Commit(
            pk, head, new, list(episode.events), fresh, local, remote, list(episode.consumed)
        )
        await self._apply(commit)
        for work in created:
            self._work_pk[work.work_id] = pk
            self._handed.add(work.work_id)
        return created

    async def _episode_head(
        self, pk: str, head: _Head | None, episode: Episode, now: str
    ) -> dict[str, Any]:
        new = (
            dict(head.raw)
            if head is not None
            else {
                "PartitionKey": pk,
                "RowKey": HEAD,
                "Status": "Running",
                "CreatedAt": now,
            }
        )
        if episode.replace_history:
            parent = ((episode.parent or {}).get("OrchestrationInstance") or {}).get("InstanceId")
            for key, value in (
                ("ExecutionId", episode.execution_id),
                ("Name", episode.name),
                ("Version", episode.version),
                ("ParentInstanceId", parent),
            ):
                new.pop(key, None)
                if value is not None:
                    new[key] = value
            await self._put_text(new, "Input", episode.input_json)
            await self._put_text(new, "Output", None)
            await self._put_text(new, "CustomStatus", None)
        new["UpdatedAt"] = now
        if episode.status is not None:
            new["Status"] = episode.status
        if episode.status in TERMINAL_OUTPUT or episode.rewrite_history:
            await self._put_text(new, "Output", episode.output_json)
        if episode.custom_status_changed:
            await self._put_text(new, "CustomStatus", episode.custom_status_json)
        return new

    async def _outbox(
        self, pk: str, episode: Episode
    ) -> tuple[list[ActivityWork], list[dict[str, Any]], list[dict[str, Any]]]:
        created: list[ActivityWork] = []
        local: list[dict[str, Any]] = []
        remote: list[dict[str, Any]] = []
        for item in episode.outbox:
            if item.kind == "activity":
                work, row = await self._work_row(pk, item.payload)
                created.append(work)
                local.append(row)
                continue
            target = _pk(item.target)
            _, row = await self._inbox_row(target, item.payload, item.visible_at)
            (local if target == pk else remote).append(row)
        return created, local, remote

    @_edge
    async def commit_entity(self, commit: EntityCommit) -> None:
        pk = _pk(commit.instance_id)
        head = await self._head_for_commit(pk)
        new = (
            dict(head.raw)
            if head is not None
            else {
                "PartitionKey": pk,
                "RowKey": HEAD,
                "CreatedAt": commit.now,
                "Name": commit.instance_id[1:].partition("@")[0],
            }
        )
        new.update(UpdatedAt=commit.now, Status="Running", EntityExists=commit.exists)
        await self._put_text(new, "EntityState", commit.state_json)
        remote: list[dict[str, Any]] = []
        local: list[dict[str, Any]] = []
        for target, message in commit.responses:
            _, row = await self._inbox_row(_pk(target), message)
            (local if row["PartitionKey"] == pk else remote).append(row)
        await self._apply(_Commit(pk, head, new, [], False, local, remote, list(commit.consumed)))

    def _stamp(self, commit: _Commit) -> None:
        """Give the commit its token and sequence and reset the previous commit's marks."""
        assert self._lease is not None
        head = commit.head
        commit.token = uuid.uuid4().hex
        commit.seq = (head.seq if head is not None else 0) + 1
        for key in ("Consumed", "ConsumedBlob", "OldGen", "Pending"):
            commit.new.pop(key, None)
        commit.new.update(Seq=commit.seq, Tok=commit.token, Epoch=self._lease.epoch, W=self._writer)
        if commit.fresh_history and head is not None and head.gen and head.count > 0:
            commit.new["OldGen"] = head.gen

    async def _apply(self, commit: _Commit) -> None:
        """Stage what cannot join the commit transaction, commit, then finish (module doc)."""
        self._stamp(commit)
        ops = await self._plan_small(commit)
        if ops is None:
            ops = await self._stage_large(commit)
        faults.hit("store.before_commit")  # crash point: staged, not committed
        await self._commit_point(commit, ops)
        await self._after_commit(commit)

    async def _plan_small(self, commit: _Commit) -> list[tuple[Any, ...]] | None:
        """The commit as one transaction, with remote messages staged; None if too large."""
        new, head = commit.new, commit.head
        if len(commit.events) + len(commit.local) + len(commit.deletes) + 2 > BATCH_OPS:
            return None  # too many operations whatever their size: do not build rows twice
        gen = _new_gen() if commit.fresh_history else head.gen if head else _new_gen()
        base = 0 if commit.fresh_history or head is None else head.count
        history = [
            await self._history_row(commit.pk, gen, base + i, e)
            for i, e in enumerate(commit.events)
        ]
        index = await self._index_rows(commit, commit.remote)
        ops: list[tuple[Any, ...]] = [("create", r) for r in (*history, *commit.local, *index)]
        ops += [
            ("delete", {"PartitionKey": commit.pk, "RowKey": _rk_inbox(i)}) for i in commit.deletes
        ]
        ops.append(_reset_attempts(commit.pk))
        size = sum(_row_size(op[1]) for op in ops) + _row_size(new)
        if len(ops) + 1 > BATCH_OPS or size > BATCH_BYTES:
            return None
        new.update(Gen=gen, Count=base + len(commit.events))
        new["Pending"] = ("R" if commit.remote else "") + ("G" if "OldGen" in new else "")
        await self._stage(commit, commit.remote)
        return ops

    async def _stage_large(self, commit: _Commit) -> list[tuple[Any, ...]]:
        """Write every row before the commit point, invisible until the head names them."""
        head, new = commit.head, commit.new
        old = (
            []
            if commit.fresh_history or head is None
            else await self._current_history(commit.pk, head)
        )
        gen = _new_gen()
        events = [*old, *commit.events]
        history = await asyncio.gather(
            *(self._history_row(commit.pk, gen, i, e) for i, e in enumerate(events))
        )
        await self._write_own_rows(commit.pk, list(history))
        marked = commit.local + commit.remote
        await self._stage(commit, marked)
        index = await self._index_rows(commit, marked)
        await self._write_own_rows(commit.pk, index)
        if head is not None and head.gen and head.count > 0 and not commit.fresh_history:
            new["OldGen"] = head.gen
        new.update(Gen=gen, Count=len(events))
        await self._put_text(new, "Consumed", json.dumps(commit.deletes))
        new["Pending"] = "RCG" if "OldGen" in new else "RC"
        return [_reset_attempts(commit.pk)]

    async def _stage(self, commit: _Commit, rows: list[dict[str, Any]]) -> None:
        for row in rows:
            row.update(Tok=commit.token, Src=commit.pk, SrcSeq=commit.seq)
        own = [r for r in rows if r["PartitionKey"] == commit.pk]
        await self._write_own_rows(commit.pk, own)
        await asyncio.gather(*(self._upsert(r) for r in rows if r["PartitionKey"] != commit.pk))

    async def _write_own_rows(self, pk: str, rows: list[dict[str, Any]]) -> None:
        """Upsert rows of one partition in transactions that respect the limits."""
        batches: list[list[tuple[Any, ...]]] = [[]]
        size = 0
        for row in rows:
            row_size = _row_size(row)
            if len(batches[-1]) >= BATCH_OPS or size + row_size > BATCH_BYTES:
                batches.append([])
                size = 0
            batches[-1].append(("upsert", row, {"mode": UpdateMode.REPLACE}))
            size += row_size
        await asyncio.gather(*(self._transact(b) for b in batches if b))

    async def _index_rows(
        self, commit: _Commit, rows: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        refs = [[r["PartitionKey"], r["RowKey"]] for r in rows]
        index: list[dict[str, Any]] = []
        for n, chunk in enumerate(_chunks(refs, 200)):
            row = {
                "PartitionKey": commit.pk,
                "RowKey": f"o{commit.seq:010d}.{commit.token}.{n:04d}",
            }
            await self._put_text(row, "Refs", json.dumps(chunk))
            index.append(row)
        return index

    async def _commit_point(self, commit: _Commit, ops: list[tuple[Any, ...]]) -> None:
        """The one conditional write that makes the commit visible, exactly once."""
        head, new = commit.head, commit.new
        if head is not None:
            first: tuple[Any, ...] = (
                "update",
                new,
                {
                    "mode": UpdateMode.REPLACE,
                    "etag": head.etag,
                    "match_condition": MatchConditions.IfNotModified,
                },
            )
        else:
            first = ("create", new)

        async def attempt() -> None:
            try:
                await self._table.submit_transaction([first, *ops])
            except HttpResponseError as exc:
                if _transient(exc):
                    raise
                if await self._committed(commit):
                    return  # a retry of a commit whose first response was lost
                raise StoreConflictError(
                    f"instance {_unpk(commit.pk)} changed since it was read ({exc.status_code})"
                ) from None
            self._faults.hit("commit")

        await self._retry("commit", attempt, write=True)

    async def _committed(self, commit: _Commit) -> bool:
        """Did a commit whose outcome we did not see happen? Runs inside a retry attempt."""
        try:
            row = await self._table.get_entity(commit.pk, HEAD)
        except ResourceNotFoundError:
            return False
        return bool(row.get("Tok") == commit.token)

    async def _after_commit(self, commit: _Commit) -> None:
        if commit.new.get("Pending"):
            head = _Head(commit.new, "")
            try:
                await self._finish(commit.pk, head)
            except (AzureError, AzureStoreError) as exc:
                # Committed all the same: the next commit of this instance finishes it.
                log.warning("post-commit work for %s deferred: %s", _unpk(commit.pk), exc)
        else:
            self._finished.pop(commit.pk, None)

    # --- activities -------------------------------------------------------------------------

    @_edge
    async def complete_activity(
        self, work_id: int, instance_id: str, message: dict[str, Any], now: str
    ) -> bool:
        pk = _pk(instance_id)
        self._handed.discard(work_id)
        for _ in range(5):
            _, row = await self._inbox_row(pk, message)
            row["N"] = uuid.uuid4().hex
            faults.hit("store.before_commit")
            done = await self._retry(
                "complete an activity",
                functools.partial(self._complete_once, pk, work_id, row),
                write=True,
            )
            if done is not None:
                if done:
                    self._work_pk.pop(work_id, None)
                return done
        raise StoreConflictError("could not allocate a message id")

    async def _complete_once(self, pk: str, work_id: int, row: dict[str, Any]) -> bool | None:
        """Delete the work item and add the result in one transaction.

        True: this call completed it; False: it was already gone (another run reported);
        None: the result's id collided with another message, try again with a new id.
        """
        ops = [("delete", {"PartitionKey": pk, "RowKey": _rk_work(work_id)}), ("create", row)]
        try:
            await self._table.submit_transaction(ops)
        except HttpResponseError as exc:
            if _transient(exc):
                raise
            try:
                found = await self._table.get_entity(pk, row["RowKey"])
                if found.get("N") == row["N"]:
                    return True  # our earlier attempt applied; its response was lost
            except ResourceNotFoundError:
                pass
            return None if _status(exc) == 409 else False
        self._faults.hit("complete")
        return True

    @_edge
    async def pending_activities(self) -> list[ActivityWork]:
        rows = await self._query("RowKey ge @lo and RowKey lt @hi", {"lo": "w", "hi": "x"})
        return await self._visible_work(rows)

    async def _visible_work(self, rows: list[Any]) -> list[ActivityWork]:
        heads: dict[str, _Head | None] = {}
        found: list[ActivityWork] = []
        for row in sorted(rows, key=lambda r: r["RowKey"]):
            pk = row["PartitionKey"]
            if not await self._visible(row, heads):
                continue
            work_id = int(row["RowKey"][1:])
            input_json = await self._get_text(row, "Input")
            found.append(
                ActivityWork(
                    work_id,
                    _unpk(pk),
                    row["ExecutionId"],
                    int(row["TaskId"]),
                    row["Name"],
                    input_json,
                    int(row.get("DequeueCount", 0)),
                )
            )
            self._work_pk[work_id] = pk
            self._handed.add(work_id)
        return found

    @_edge
    async def mark_activity_dequeued(self, work_id: int) -> int:
        pk = self._work_pk.get(work_id) or await self._find_work(work_id)
        if pk is None:
            return 0
        faults.hit("store.before_commit")
        for _ in range(10):
            count = await self._retry(
                "count a dequeue", functools.partial(self._dequeue_once, pk, work_id), write=True
            )
            if count is not None:
                if count == 0:
                    self._handed.discard(work_id)
                return count
        raise StoreConflictError(f"work item {work_id} kept changing")

    async def _dequeue_once(self, pk: str, work_id: int) -> int | None:
        try:
            row = await self._table.get_entity(pk, _rk_work(work_id))
        except ResourceNotFoundError:
            return 0
        count = int(row.get("DequeueCount", 0)) + 1
        try:
            await self._table.update_entity(
                {"PartitionKey": pk, "RowKey": row["RowKey"], "DequeueCount": count},
                mode=UpdateMode.MERGE,
                etag=row.metadata["etag"],
                match_condition=MatchConditions.IfNotModified,
            )
        except ResourceNotFoundError:
            return 0
        except HttpResponseError as exc:
            if _status(exc) == 412:
                return None  # changed meanwhile (or our lost response applied): read again
            raise
        return count

    @_edge
    async def release_activity(self, work_id: int) -> None:
        """Undo one dequeue: the run was abandoned by a graceful stop, it did not crash."""
        pk = self._work_pk.get(work_id) or await self._find_work(work_id)
        if pk is None:
            return
        for _ in range(10):
            done = await self._retry(
                "release a work item",
                functools.partial(self._undequeue_once, pk, work_id),
                write=True,
            )
            if done:
                return
        raise StoreConflictError(f"work item {work_id} kept changing")

    async def _undequeue_once(self, pk: str, work_id: int) -> bool:
        try:
            row = await self._table.get_entity(pk, _rk_work(work_id))
        except ResourceNotFoundError:
            return True
        count = max(int(row.get("DequeueCount", 0)) - 1, 0)
        try:
            await self._table.update_entity(
                {"PartitionKey": pk, "RowKey": row["RowKey"], "DequeueCount": count},
                mode=UpdateMode.MERGE,
                etag=row.metadata["etag"],
                match_condition=MatchConditions.IfNotModified,
            )
        except ResourceNotFoundError:
            return True
        except HttpResponseError as exc:
            if _status(exc) == 412:
                return False
            raise
        return True

    @_edge
    async def begin_attempt(self, instance_id: str) -> int:
        """Count one more attempt at the instance's next episode; committing resets it."""
        pk = _pk(instance_id)
        row = self._attempts.pop(pk, None)  # as read by the fetch that preceded this call
        for _ in range(10):
            nonce = uuid.uuid4().hex
            count = await self._retry(
                "count an attempt",
                functools.partial(self._attempt_once, pk, row, nonce),
                write=True,
            )
            if count is not None:
                return count
            row = await self._read_row(pk, ATTEMPTS)
        raise StoreConflictError(f"the attempt count of {instance_id} kept changing")

    async def _attempt_once(self, pk: str, row: Any, nonce: str) -> int | None:
        count = (int(row.get("Count", 0)) if row is not None else 0) + 1
        new = {"PartitionKey": pk, "RowKey": ATTEMPTS, "Count": count, "N": nonce}
        try:
            if row is None:
                await self._table.create_entity(new)
            else:
                await self._table.update_entity(
                    new,
                    mode=UpdateMode.REPLACE,
                    etag=row.metadata["etag"],
                    match_condition=MatchConditions.IfNotModified,
                )
        except (ResourceExistsError, ResourceNotFoundError):
            return await self._applied_count(pk, nonce)
        except HttpResponseError as exc:
            if _status(exc) != 412:
                raise
            return await self._applied_count(pk, nonce)
        return count

    async def _applied_count(self, pk: str, nonce: str) -> int | None:
        """The count our own write left, if a lost response hid that it applied."""
        try:
            found = await self._table.get_entity(pk, ATTEMPTS)
        except ResourceNotFoundError:
            return None
        return int(found["Count"]) if found.get("N") == nonce else None

    async def _read_row(self, pk: str, rk: str) -> Any:
        async def attempt() -> Any:
            try:
                return await self._table.get_entity(pk, rk)
            except ResourceNotFoundError:
                return None

        return await self._retry("read a row", attempt, write=False)

    async def _find_work(self, work_id: int) -> str | None:
        rows = await self._query(
            "RowKey eq @rk", {"rk": _rk_work(work_id)}, select=["PartitionKey"]
        )
        return rows[0]["PartitionKey"] if rows else None

    # --- readiness and timers --------------------------------------------------------------

    @_edge
    async def ready_instances(self, now: str, due_only: bool = False) -> list[str]:
        """Instances with visible messages (``due_only``: only those with due timers)."""
        flt = "RowKey ge @lo and RowKey lt @hi"
        if due_only:
            flt += " and VisibleAt le @now"
        rows = await self._query(
            flt,
            {"lo": "i", "hi": "j", "now": now},
            select=["PartitionKey", "RowKey", "VisibleAt", "Tok", "Src", "SrcSeq"],
        )
        heads: dict[str, _Head | None] = {}
        ready: set[str] = set()
        for row in rows:
            if row["PartitionKey"] in ready or (row.get("VisibleAt") or "") > now:
                continue
            if await self._visible(row, heads):
                ready.add(row["PartitionKey"])
        return sorted(_unpk(pk) for pk in ready)

    @_edge
    async def next_due(self, now: str) -> str | None:
        rows = await self._query(
            "RowKey ge @lo and RowKey lt @hi and VisibleAt gt @now",
            {"lo": "i", "hi": "j", "now": now},
            select=["VisibleAt"],
        )
        return min((r["VisibleAt"] for r in rows), default=None)

    async def poll(self) -> tuple[list[str], list[ActivityWork]]:
        """Wait, then report work this process was not told about; never raises.

        Inbox rows written by another process, own rows left unprocessed for
        ``STALE_SECONDS`` and work items never handed to this engine. The wait starts
        at ``POLL_MIN`` and doubles up to ``POLL_MAX`` while nothing foreign turns up.
        """
        await asyncio.sleep(self._poll_delay)
        try:
            instance_ids, foreign = await self._poll_inbox()
            rows = await self._query("RowKey ge @lo and RowKey lt @hi", {"lo": "w", "hi": "x"})
            fresh = [r for r in rows if int(r["RowKey"][1:]) not in self._handed]
            works = await self._visible_work(fresh)
        except (AzureError, AzureStoreError) as exc:
            log.debug("poll failed: %s", exc)
            self._poll_delay = min(self._poll_delay * 2, POLL_MAX)
            return [], []
        busy = foreign or bool(works)
        self._poll_delay = POLL_MIN if busy else min(self._poll_delay * 2, POLL_MAX)
        return instance_ids, works

    async def _poll_inbox(self) -> tuple[list[str], bool]:
        rows = await self._query(
            "RowKey ge @lo and RowKey lt @hi",
            {"lo": "i", "hi": "j"},
            select=["PartitionKey", "RowKey", "VisibleAt", "W"],
        )
        now_text, now = _utc_now(), time.time()
        ready: set[str] = set()
        foreign = False
        for row in rows:
            visible_at = row.get("VisibleAt") or ""
            if visible_at > now_text:
                continue
            written = _id_seconds(int(row["RowKey"][1:]))
            due = h.parse_time(visible_at).timestamp() if visible_at else written
            if row.get("W") != self._writer:
                foreign = True
                ready.add(row["PartitionKey"])
            elif now - max(written, due) > STALE_SECONDS:
                ready.add(row["PartitionKey"])
        return sorted(_unpk(pk) for pk in ready), foreign

    # --- queries and purge ----------------------------------------------------------------

    @_edge
    async def query(self, query: Query) -> QueryPage:
        records = await self._matching(query)
        limit = query.top if query.top and query.top > 0 else None
        if limit is not None:
            records = records[:limit]
        token = records[-1].instance_id if limit and len(records) == limit else None
        return QueryPage(records, token)

    async def _matching(self, query: Query) -> list[InstanceRecord]:
        flt, params = _filters(query)
        rows = await self._query(flt, params)
        keep = [r for r in rows if _wanted(_unpk(r["PartitionKey"]), query)]
        keep.sort(key=lambda r: _unpk(r["PartitionKey"]))
        return list(await asyncio.gather(*(self._record(r["PartitionKey"], dict(r)) for r in keep)))

    @_edge
    async def purge(self, instance_id: str) -> int:
        return await self._purge_pk(_pk(instance_id))

    @_edge
    async def purge_many(self, query: Query) -> int:
        records = await self._matching(
            Query(**{**_query_fields(query), "top": None, "continuation": None})
        )
        counts = [await self._purge_pk(_pk(r.instance_id)) for r in records]
        return sum(counts)

    async def _purge_pk(self, pk: str) -> int:
        count = 0
        for _ in range(5):
            head = await self._read_head(pk)
            self._check_epoch(head)
            await self._settle(pk, head)  # deliver what its last commit sent before it goes
            if head is None:
                break
            faults.hit("store.before_commit")
            if await self._delete_row(pk, HEAD, head.etag):
                count = 1
                break
        else:
            raise StoreConflictError(f"instance {_unpk(pk)} kept changing while it was purged")
        rows = await self._query("PartitionKey eq @pk", {"pk": pk}, select=["RowKey"])
        await self._delete_rows(pk, [r["RowKey"] for r in rows if r["RowKey"] != HEAD])
        await self._delete_blobs(_blob_dir(pk) + "/")
        for work_id in [w for w, p in self._work_pk.items() if p == pk]:
            self._work_pk.pop(work_id, None)
            self._handed.discard(work_id)
        self._finished.pop(pk, None)
        self._seen.pop(pk, None)
        self._attempts.pop(pk, None)
        return count

    async def _delete_blobs(self, prefix: str) -> None:
        async def attempt() -> None:
            names = [b.name async for b in self._container.list_blobs(name_starts_with=prefix)]
            for name in names:
                try:
                    await self._container.delete_blob(name)
                except ResourceNotFoundError:
                    pass

        await self._retry("delete payloads", attempt, write=True)


# --- helpers ------------------------------------------------------------------------------


def _decode_message(text: str) -> dict[str, Any]:
    """An inbox row as a message; one that cannot be decoded says so (the engine quarantines)."""
    try:
        message = json.loads(text)
    except ValueError as exc:
        return {"kind": "undecodable", "error": str(exc), "text": text[:200]}
    if not isinstance(message, dict) or "kind" not in message:
        return {"kind": "undecodable", "error": "not a message object", "text": text[:200]}
    return message


def _chunks(items: list[T], size: int) -> list[list[T]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def _reset_attempts(pk: str) -> tuple[Any, ...]:
    """Part of every commit transaction: the episode finished, attempts start over."""
    return (
        "upsert",
        {"PartitionKey": pk, "RowKey": ATTEMPTS, "Count": 0},
        {"mode": UpdateMode.REPLACE},
    )


def _query_fields(query: Query) -> dict[str, Any]:
    return {name: getattr(query, name) for name in Query.__dataclass_fields__}


def _filters(query: Query) -> tuple[str, dict[str, Any]]:
    """Server-side part of a query: head rows plus the range filters the table can apply."""
    where, params = ["RowKey eq @head"], {"head": HEAD}
    for column, op, name, value in (
        ("CreatedAt", "ge", "cf", query.created_from),
        ("CreatedAt", "le", "ct", query.created_to),
        ("UpdatedAt", "ge", "uf", query.updated_from),
        ("UpdatedAt", "le", "ut", query.updated_to),
    ):
        if value is not None:
            where.append(f"{column} {op} @{name}")
            params[name] = value
    if query.statuses:
        alternatives = []
        for n, status in enumerate(query.statuses):
            alternatives.append(f"Status eq @s{n}")
            params[f"s{n}"] = status
        where.append("( " + " or ".join(alternatives) + " )")
    if query.entities is True:
        where.append("PartitionKey ge '@' and PartitionKey lt 'A'")
    elif query.entities is False:
        where.append("(PartitionKey lt '@' or PartitionKey ge 'A')")
    return " and ".join(where), params


def _wanted(instance_id: str, query: Query) -> bool:
    """Client-side part of a query: conditions on the (unescaped) instance id."""
    if query.continuation is not None and not instance_id > query.continuation:
        return False
    return not query.prefix or instance_id.startswith(query.prefix)
