"""The store's one IO shell: a psycopg connection pool, and transactions that retry a lost
connection, are fenced by their partition's epoch, and leave as the port's errors.

``Database.write(operation, body, fence=instance_id)`` runs ``body(conn)`` in one
transaction that first reads the transaction id and, for an owner write (``fence``: the
instance whose partition this host must own), takes a share lock on that partition's row
with the epoch this host holds (``FOR KEY SHARE``: renewals do not wait for it, a takeover
does). No row: another host took the partition over; the write raises ``UnitLostError``
and the partition is lost here (``partitions.HubPartitions``). A connection lost before the
COMMIT was sent retries on a new connection with back-off, for at most
``retry_seconds``; one lost while the COMMIT was in flight asks the server what became of
that transaction (``pg_xact_status``) and retries only if it did not commit, so a write
applies once - unless the server restarted meanwhile, when the answer is unknown
(``_committed``). What still fails is a ``StoreFailedError`` (a ``StoreError``: the engine
retries the work later and never counts it towards poison). Every message that leaves
passes through ``settings.redact``: the password is never in it.

``round_trips`` counts the round trips: statements, BEGINs and COMMITs sent.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import weakref
from collections.abc import Awaitable, Callable
from contextlib import nullcontext
from typing import Any, Protocol, TypeVar

import psycopg
from psycopg import AsyncConnection, sql
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from durable_host.ops import faults
from durable_host.store.base import StoreError, StoreLostError, UnitLostError
from durable_host.store.postgres.settings import PostgresSettings, redact

T = TypeVar("T")
Conn = AsyncConnection[tuple[Any, ...]]
log = logging.getLogger("durable_host.store.postgres")
BACKOFF_FIRST, BACKOFF_MAX = 0.05, 2.0
# The server's side of a silent client (seconds; tcp_user_timeout in ms): probes after 10 s
# idle, every 5 s, 3 unanswered end it; unacknowledged data ends it after 20 s.
SERVER_KEEPALIVES = (
    ("tcp_keepalives_idle", 10),
    ("tcp_keepalives_interval", 5),
    ("tcp_keepalives_count", 3),
    ("tcp_user_timeout", 20_000),
)
# Membership statements (heartbeats, renewals, acquire, evict, release) wait at most this
# long for a row lock: a lock is held only by a transaction in flight or by the session of a
# cut host, and a balancing round must not wait for the latter (the next round tries again).
MEMBERSHIP_LOCK_TIMEOUT = "1s"
# What a transaction reads first: its id, and the start time of the server that gave it.
XACT = "pg_current_xact_id()::text::bigint, pg_postmaster_start_time()::text"


class Fencer(Protocol):
    """Which partition and epoch an owner write must lock; ``lose`` when it is gone."""

    def check(self, instance_id: str) -> tuple[int, int]: ...

    def owns(self, instance_id: str) -> bool: ...

    def lose(self, unit: int, why: str) -> None: ...


class StoreFailedError(StoreError):
    """The database failed or could not be reached; the operation may be retried."""


class LockBusyError(StoreFailedError):
    """A membership statement met a row lock held longer than its ``lock_timeout``."""


class WorkGone(Exception):
    """A step's work item was already completed: its transaction applies nothing."""


class Database:
    """A pool of connections to one hub's schema (module docstring)."""

    def __init__(self, settings: PostgresSettings) -> None:
        self.settings = settings
        self.round_trips = 0
        self.fencer: Fencer | None = None  # None: read-only, owner writes are refused
        self.writer = ""  # this process's id: the claimer of the activities it commits
        self.lost: StoreLostError | None = None
        self.on_lost: Callable[[str], None] | None = None
        self.pool: AsyncConnectionPool[Conn] | None = None
        self._started: weakref.WeakKeyDictionary[Conn, str] = weakref.WeakKeyDictionary()
        # Statements every pooled connection prepares by name (SQL PREPARE), each keyed by
        # the query text it stands for: ``call_begun`` sends ``EXECUTE name(...)`` for them.
        self.prepared: dict[str, tuple[str, str]] = {}

    async def connect(self) -> Conn:
        """A connection of its own (migrations, LISTEN), set up as the pool's are."""
        try:
            conn = await AsyncConnection.connect(self.settings.conninfo, autocommit=True)
        except psycopg.Error as exc:
            raise self.failed("could not connect", exc) from None
        await self._configure(conn)
        return conn

    async def _configure(self, conn: Conn) -> None:
        schema = sql.Identifier(self.settings.schema)
        await conn.execute(sql.SQL("SET search_path TO {}").format(schema))
        # The start time of the server this connection talks to, for a folded call's
        # transaction id (``_committed``): a restarted server ends every connection, so a
        # connection's value is always its own server's.
        cur = await conn.execute("SELECT pg_postmaster_start_time()::text")
        row = await cur.fetchone()
        self._started[conn] = str(row[0]) if row else ""
        # What the server does with a session whose host is cut off: a transaction left
        # open ends after idle_in_transaction_session_timeout (its row locks - a partition's
        # fence, a heartbeat - go with it, so a takeover never waits for the cut to heal),
        # and the server's keepalives close a dead session within about half a minute.
        for name, value in (
            ("statement_timeout", self.settings.statement_timeout_ms),
            ("idle_in_transaction_session_timeout", self.settings.idle_transaction_ms),
            *SERVER_KEEPALIVES,
        ):
            await conn.execute(
                sql.SQL("SET {} = {}").format(sql.Identifier(name), sql.Literal(value))
            )

    async def _configure_pooled(self, conn: Conn) -> None:
        await self._configure(conn)
        await _prepare(conn, self.prepared)

    async def open_pool(self) -> None:
        self.pool = AsyncConnectionPool(
            self.settings.conninfo,
            min_size=1,
            max_size=self.settings.pool_size,
            kwargs={"autocommit": True},
            configure=self._configure_pooled,
            open=False,
            timeout=self.settings.retry_seconds or 5.0,
            name=f"durable-host-{self.settings.hub}",
        )
        try:
            await self.pool.open(wait=True, timeout=max(self.settings.retry_seconds, 5.0))
        except PoolTimeout as exc:
            await self.pool.close()
            raise self.failed("could not connect", exc) from None

    async def close(self) -> None:
        if self.pool is not None:
            await self.pool.close()
            self.pool = None

    def failed(self, what: str, exc: BaseException) -> StoreFailedError:
        text = redact(f"{what}: {exc}".strip(), self.settings.conninfo)
        return StoreFailedError(f"{self.settings.describe()}: {text}")

    def lose(self, reason: str) -> StoreLostError:
        if self.lost is None:
            self.lost = StoreLostError(reason)
            log.critical("%s", reason)
            if self.on_lost is not None:
                self.on_lost(reason)
        return self.lost

    async def execute(self, conn: Conn, query: Any, args: Any = None) -> psycopg.AsyncCursor[Any]:
        self.round_trips += 1
        return await conn.execute(query, args)

    async def read(self, body: Callable[[Conn], Awaitable[T]]) -> T:
        """``body`` on a pooled connection outside any transaction (reads of one statement)."""
        return await self._retrying("a read", lambda conn: body(conn), transaction=False)

    async def statement(self, operation: str, body: Callable[[Conn], Awaitable[T]]) -> T:
        """``body``, one idempotent write statement, on a pooled connection outside any
        transaction: one round trip instead of a transaction's four or five, for the
        heartbeat, which must get through a slow link within the silence."""
        return await self._retrying(operation, body, transaction=False)

    async def write(
        self,
        operation: str,
        body: Callable[[Conn], Awaitable[T]],
        *,
        fence: str | None = None,
        fault: bool = True,
    ) -> T:
        """``body`` in one transaction; ``fence``: the instance whose partition this host
        must own for the write to commit (module docstring); ``fault``: the SIGKILL point
        ``store.before_commit`` of crash tests fires before its COMMIT."""
        return await self._retrying(operation, body, transaction=True, fence=fence, fault=fault)

    async def call(
        self,
        operation: str,
        body: Callable[[Conn, tuple[int, int] | None], Awaitable[tuple[int | None, T]]],
        *,
        fence: str | None = None,
    ) -> T:
        """``write`` for a body that is one call of a server-side function (``functions``):
        the call takes the fence (the partition and epoch, None unfenced) and answers the
        transaction id with its result (None for the id: the partition is lost), so the
        transaction is three round trips: BEGIN, the call, COMMIT."""
        return await self._retrying(
            operation, body, transaction=True, fence=fence, fault=True, folded=True
        )

    async def call_begun(
        self,
        operation: str,
        body: Callable[[Conn, tuple[int, int] | None], Awaitable[tuple[int | None, T]]],
        *,
        fence: str | None = None,
    ) -> T:
        """``call`` in two round trips: ``BEGIN`` goes out with the call, in one message
        (``Begun``), then ``COMMIT``; the fence, the fault point and the settling of a lost
        ``COMMIT`` are ``call``'s. The message is simple-query text, its arguments bound on
        this side: a call the connections prepared (``prepared``) goes as ``EXECUTE`` of
        its statement, which the server does not plan again. In pipeline mode (off by
        default) this is ``call``."""
        if self.settings.pipeline:
            return await self.call(operation, body, fence=fence)
        return await self._retrying(
            operation, body, transaction=True, fence=fence, fault=True, folded=True, begun=True
        )

    async def _retrying(
        self,
        operation: str,
        body: Callable[..., Awaitable[Any]],
        *,
        transaction: bool,
        fence: str | None = None,
        fault: bool = False,
        folded: bool = False,
        begun: bool = False,
    ) -> T:
        if self.lost is not None:
            raise self.lost
        assert self.pool is not None, "store is not open"
        deadline = time.monotonic() + self.settings.retry_seconds
        delay = BACKOFF_FIRST
        while True:
            try:
                if begun:
                    return await self._begun(operation, body, fence)
                if transaction:
                    return await self._transaction(operation, body, fence, fault, folded)
                async with self.pool.connection() as conn:
                    return await body(conn)
            except _Retry as retry:
                error: BaseException = retry.error
            # Both are OperationalErrors: caught before the clause that retries those.
            except psycopg.errors.LockNotAvailable as exc:  # lock_timeout: the caller decides
                raise LockBusyError(
                    redact(
                        f"{operation}: a row is locked by another session ({exc})".strip(),
                        self.settings.conninfo,
                    )
                ) from None
            except psycopg.errors.QueryCanceled as exc:  # statement_timeout: not retried here
                raise self.failed(f"{operation} timed out", exc) from None
            except (psycopg.OperationalError, PoolTimeout) as exc:
                error = exc
            except (psycopg.errors.SerializationFailure, psycopg.errors.DeadlockDetected) as exc:
                error = exc
            except psycopg.DatabaseError as exc:  # e.g. a full disk: the store's, not the work's
                if isinstance(exc, psycopg.ProgrammingError | psycopg.DataError):
                    raise
                raise self.failed(f"{operation} failed", exc) from None
            if time.monotonic() + delay > deadline:
                raise self.failed(f"{operation} failed", error) from None
            log.info(
                "%s: %s; retrying in %.2fs",
                operation,
                redact(str(error).strip(), self.settings.conninfo),
                delay,
            )
            await asyncio.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, BACKOFF_MAX)

    async def _transaction(
        self,
        operation: str,
        body: Callable[..., Awaitable[Any]],
        fence: str | None,
        fault: bool,
        folded: bool = False,
    ) -> T:
        assert self.pool is not None
        xid: tuple[int, str] | None = None  # the transaction's id, and its server's start time
        # Before any connection is taken: a partition not held here writes nothing.
        unit_epoch = self._unit_epoch(fence) if fence is not None else None
        committing = False
        # The error is caught outside the pool's block, not inside it: a block that ends
        # cleanly makes psycopg COMMIT the connection, and on a session the server
        # terminated just after answering the transaction's COMMIT in pipeline mode that
        # COMMIT fails with an error of its own, which would escape the settling below and
        # run an applied transaction again (docs/postgres.md, "Pipeline mode"). Raised
        # through the block, the error makes psycopg roll back (a no-op) and the pool
        # drop the connection.
        try:
            async with self.pool.connection() as conn:
                pipelined = conn.pipeline() if self.settings.pipeline else nullcontext()
                self.round_trips += 1  # BEGIN: a round trip of its own
                async with pipelined, conn.transaction():
                    if folded:  # the fence and the transaction id come with the body's call
                        self.round_trips += 1
                        number, result = await body(conn, unit_epoch)
                        xid = (self._held(number, unit_epoch), self._started[conn])
                    else:
                        # Sent first (the partition's row is locked before anything is
                        # written), read once the body's statements are on their way.
                        first = await self._fence(conn, unit_epoch)
                        result = await body(conn)
                        xid = await self._fenced(first, unit_epoch)
                    if fault:
                        faults.hit("store.before_commit")
                    committing = True
                    self.round_trips += 1
            return result
        except psycopg.Error as exc:
            if not committing or xid is None:
                raise
            error: psycopg.Error = exc
        return await self._settled(operation, xid, error, result)

    async def _begun(
        self,
        operation: str,
        body: Callable[..., Awaitable[Any]],
        fence: str | None,
    ) -> T:
        """``_transaction`` for a folded call whose ``BEGIN`` travels with it (``call_begun``):
        the same fence, fault point and settling of a lost ``COMMIT``."""
        assert self.pool is not None
        xid: tuple[int, str] | None = None
        unit_epoch = self._unit_epoch(fence) if fence is not None else None
        committing = False
        try:  # outside the pool's block, as in ``_transaction``
            async with self.pool.connection() as conn:
                try:
                    self.round_trips += 1  # BEGIN and the call: one round trip
                    number, result = await body(Begun(conn, self.prepared), unit_epoch)
                    xid = (self._held(number, unit_epoch), self._started[conn])
                    faults.hit("store.before_commit")
                    committing = True
                    self.round_trips += 1
                    await conn.execute("COMMIT")
                except BaseException:
                    if not committing:
                        await _roll_back(conn)
                    raise
            return result
        except psycopg.Error as exc:
            if not committing or xid is None:
                raise
            error: psycopg.Error = exc
        return await self._settled(operation, xid, error, result)

    async def _settled(
        self, operation: str, xid: tuple[int, str], error: psycopg.Error, result: T
    ) -> T:
        """The COMMIT was sent and its answer lost: the result when the transaction applied,
        else a retry of the whole operation."""
        if await self._committed(xid):
            log.warning("%s reported %r after it had applied; it stands", operation, error)
            return result
        raise _Retry(error)

    def _unit_epoch(self, instance_id: str) -> tuple[int, int]:
        if self.fencer is None:
            raise UnitLostError(f"opened read-only: no partition is held (instance {instance_id})")
        return self.fencer.check(instance_id)

    async def _fence(
        self, conn: Conn, unit_epoch: tuple[int, int] | None
    ) -> psycopg.AsyncCursor[Any]:
        """The transaction id and, for an owner write, the lock on its partition's row with
        this host's epoch, sent first (before anything is written)."""
        if unit_epoch is None:
            return await self.execute(conn, f"SELECT {XACT}")
        return await self.execute(
            conn,
            f"SELECT {XACT} FROM partitions WHERE unit = %s AND epoch = %s FOR KEY SHARE",
            unit_epoch,
        )

    async def _fenced(
        self, fence: psycopg.AsyncCursor[Any], unit_epoch: tuple[int, int] | None
    ) -> tuple[int, str]:
        """The transaction id and the server's start time, or ``UnitLostError`` when
        another host took the partition."""
        row = await fence.fetchone()
        number = self._held(None if row is None else int(row[0]), unit_epoch)
        assert row is not None
        return number, str(row[1])

    def _held(self, xid: int | None, unit_epoch: tuple[int, int] | None) -> int:
        """``xid``, or ``UnitLostError`` when there is none: another host took the partition."""
        if xid is None:
            assert unit_epoch is not None
            unit, epoch = unit_epoch
            why = f"another host took it over (this host's epoch was {epoch})"
            if self.fencer is not None:
                self.fencer.lose(unit, why)
            raise UnitLostError(f"partition {unit}: {why}")
        return xid

    async def _committed(self, xid: tuple[int, str]) -> bool:
        """Did transaction ``xid`` (its id, its server's start time) commit? Asked on a new
        connection, with retries.

        Only while the server that gave the id still runs: a server that crashed and
        recovered (or a new primary) hands out again the ids that never reached its log,
        so ``pg_xact_status`` may answer for another transaction that took the same id
        (seen: "committed" for an episode that had not applied, which then applied twice).
        Then the answer is unknown: a ``StoreFailedError``, and the engine, which reads the
        instance again before it retries, finds out from the data itself."""
        number, started = xid
        assert self.pool is not None
        deadline = time.monotonic() + max(self.settings.retry_seconds, 1.0)
        delay = BACKOFF_FIRST
        while True:
            try:
                async with self.pool.connection() as conn:
                    cur = await self.execute(
                        conn,
                        "SELECT pg_xact_status(%s::text::xid8), pg_postmaster_start_time()::text",
                        (str(number),),
                    )
                    row = await cur.fetchone()
            except psycopg.errors.InvalidParameterValue:
                # "transaction ID ... is in the future": the server crashed and recovered
                # before the id was ever written to its log, so no commit of it can be there.
                return False
            except (psycopg.OperationalError, PoolTimeout) as exc:
                if time.monotonic() + delay > deadline:
                    raise self.failed("could not learn whether a commit applied", exc) from None
                await asyncio.sleep(delay)
                delay = min(delay * 2, BACKOFF_MAX)
                continue
            status = row[0] if row else None
            if row is not None and str(row[1]) != started:
                raise self.failed(
                    "could not learn whether a commit applied",
                    RuntimeError("the server restarted since the transaction began"),
                )
            if status != "in progress":
                return status == "committed"
            # The server has not finished it yet: ask again.
            if time.monotonic() + delay > deadline:
                raise self.failed("could not learn whether a commit applied", TimeoutError(status))
            await asyncio.sleep(delay)
            delay = min(delay * 2, BACKOFF_MAX)


class Begun:
    """A connection whose next ``execute`` sends ``BEGIN`` and the statement in one message
    (the simple query protocol, the arguments bound on this side) and answers the
    statement's cursor: what a folded call's body gets from ``Database.call_begun``. A
    query the connection prepared (``Database.prepared``) goes as ``EXECUTE`` of it, so
    the server does not plan it again."""

    def __init__(self, conn: Conn, prepared: dict[str, tuple[str, str]]) -> None:
        self.conn = conn
        self.prepared = prepared

    async def execute(self, query: str, args: Any = None) -> psycopg.AsyncCursor[Any]:
        known = self.prepared.get(query)
        sent = query if known is None else f"EXECUTE {known[0]}({', '.join(['%s'] * len(args))})"
        cur = psycopg.AsyncClientCursor(self.conn)
        try:
            await cur.execute("BEGIN; " + sent, args)
        except psycopg.errors.InvalidSqlStatementName:
            if known is None:
                raise
            # psycopg sends DEALLOCATE ALL after a ROLLBACK on a session where it prepared
            # statements of its own, which drops these too: nothing was written (the
            # transaction failed at its first statement); prepare again, send again.
            await self.conn.rollback()
            await _prepare(self.conn, self.prepared)
            await cur.execute("BEGIN; " + sent, args)
        cur.nextset()  # past BEGIN's answer, to the statement's
        return cur


async def _prepare(conn: Conn, prepared: dict[str, tuple[str, str]]) -> None:
    """SQL ``PREPARE`` of every statement in ``prepared`` (``Database.prepared``) by its name."""
    for name, statement in prepared.values():
        await conn.execute(f"PREPARE {name} AS {statement}".encode(), prepare=False)


async def _roll_back(conn: Conn) -> None:
    """End a transaction a failed or refused call left open, on a connection still usable
    (a broken one the pool drops: its transaction ended with its session)."""
    if conn.broken or conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
        return
    try:
        await conn.execute("ROLLBACK")
    except psycopg.Error:
        pass  # the pool checks the connection it gets back, and drops a bad one


class _Retry(Exception):
    """A transaction that certainly did not apply: run it again."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error
