"""The hub's index: where discovery looks instead of scanning the hub table.

Finding ready instances, due timers and activity work by scanning the hub table reads
every history row of every instance, so its cost grows with the hub. The index is a
second table (``<table>Index``) that holds only hints, so discovery reads a number of
rows proportional to the instances that have work, never to history
(``docs/azure-storage.md``, "Discovery"):

* ``l`` / ``<partition>``: a **live hint**: the instance may have immediate messages or
  activity work items (in its own partition of the hub table);
* ``t`` / ``<VisibleAt>|<partition>|<inbox row key>``: a **timer hint**: one delayed
  message (a durable timer or a scheduled start) becomes visible at that time.

An index row cannot join a commit's transaction (another table), so the rule is: a hint
is written **before** the commit point of the write that creates its work, and removed
only after the work is gone. A hint without work is harmless: discovery reads the
instance's partition (``survey``), finds nothing, and deletes the hint. Work without a
hint after a crash cannot happen, since the hint was durable first.

Within this process, a hint is written once and then trusted (``_live``): while it is
known to exist, writers skip it. A deletion of a hint therefore must not race a writer
that trusted it: every write that adds work to a partition runs inside ``adding``, which
counts it (``_busy``) and bumps the partition's version; ``survey`` deletes a hint only
if no writer was busy with the partition and its version did not move since it read the
partition, and forgets the hint before the delete is sent (a writer that comes after it
writes the hint again; the delete is conditional on the ETag, so whichever lands first,
the hint survives).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from azure.core import MatchConditions
from azure.core.exceptions import HttpResponseError, ResourceNotFoundError
from azure.data.tables import UpdateMode

from durable_host.store.azure.codec import BATCH_OPS, chunks
from durable_host.store.azure.errors import status_of
from durable_host.store.azure.tables import HubTables

LIVE = "l"
TIMERS = "t"
BUILT = ("b", "built")  # marks an index complete for the hub table beside it
_AFTER_TIME = "}"  # sorts after "|": ``<time>}`` is above every timer key of that time


def timer_key(visible_at: str, partition: str, row_key: str) -> str:
    return f"{visible_at}|{partition}|{row_key}"


def parse_timer_key(key: str) -> tuple[str, str, str]:
    """(VisibleAt, partition, inbox row key) of a timer hint."""
    visible_at, rest = key.split("|", 1)
    partition, row_key = rest.rsplit("|", 1)
    return visible_at, partition, row_key


@dataclass
class Survey:
    """What one read of an instance's partition found (``HubIndex.survey``)."""

    partition: str
    head: Any  # Head | None
    visible: list[Any] = field(default_factory=list)  # visible inbox rows, oldest first
    work: list[Any] = field(default_factory=list)  # visible work rows
    inbox_keys: set[str] = field(default_factory=set)  # every live inbox row (any visibility)
    has_live: bool = False  # immediate messages or work items, visible or not yet


class HubIndex:
    """Live and timer hints (see the module docstring)."""

    def __init__(self, tables: HubTables) -> None:
        self._tables = tables
        self._live: dict[str, str] = {}  # partition -> ETag of its live hint, as last known
        self._busy: dict[str, int] = {}  # partition -> writers adding work right now
        self._version: dict[str, int] = {}  # partition -> writers that ever began
        self._writing: dict[str, asyncio.Future[None]] = {}  # live hints being written
        self.touched: dict[str, float] = {}  # partition -> when this process last worked on it
        # Whether this process may trust what it knows of a partition's live hint: only
        # the owner of the instance's partition surveys it and drops hints (``partitions``),
        # so a hint is trusted only there; any other host writes it around every write.
        self.trusts: Callable[[str], bool] = lambda _partition: True

    # --- writers ------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def adding(
        self, live: Iterable[str], timers: Iterable[dict[str, Any]] = ()
    ) -> AsyncIterator[None]:
        """Around a write that adds work: hints first (``live`` partitions; ``timers``: the
        delayed inbox rows), then the body, which ends with the work's commit point."""
        partitions = set(live)
        timer_rows = [r for r in timers if r.get("VisibleAt")]
        partitions_of_timers = {r["PartitionKey"] for r in timer_rows}
        every = partitions | partitions_of_timers
        for p in every:
            self._busy[p] = self._busy.get(p, 0) + 1
            self._version[p] = self._version.get(p, 0) + 1
            self.touch(p)  # ``poll`` surveys it only if nothing happens to it for a while
        untrusted = {p for p in partitions if not self.trusts(p)}
        for p in untrusted:
            self._live.pop(p, None)
        try:
            await self._write_hints(partitions, timer_rows)
            yield
            # Another host owns these: its survey may have read the partition before our
            # write and drop the hint (If-Match the ETag it listed) after it. Writing the
            # hint again after the work makes that delete fail, or comes after it.
            for p in sorted(untrusted):
                self._live.pop(p, None)
                await self._write_live(p)
        finally:
            for p in every:
                self._busy[p] -= 1
                if not self._busy[p]:
                    del self._busy[p]

    async def _write_hints(self, partitions: set[str], timer_rows: list[dict[str, Any]]) -> None:
        for partition in sorted(partitions):
            await self._write_live(partition)
        timer_ops = [
            (
                "upsert",
                {
                    "PartitionKey": TIMERS,
                    "RowKey": timer_key(r["VisibleAt"], r["PartitionKey"], r["RowKey"]),
                },
                {"mode": UpdateMode.REPLACE},
            )
            for r in timer_rows
        ]
        for chunk in chunks(timer_ops, BATCH_OPS):  # one partition: one transaction per chunk
            await self._tables.retry(
                "write timer hints",
                functools.partial(self._tables.index.submit_transaction, chunk),
                write=True,
            )

    async def _write_live(self, partition: str) -> None:
        """Write a live hint unless this process knows it exists. Concurrent writers of one
        partition share one request: two racing upserts could leave the ETag of the one
        that landed first in ``_live``, and the hint would look foreign to ``poll``."""
        while partition not in self._live:
            pending = self._writing.get(partition)
            if pending is not None:
                await pending  # then look again: that write may have failed
                continue
            done = asyncio.get_running_loop().create_future()
            self._writing[partition] = done
            hint = {"PartitionKey": LIVE, "RowKey": partition, "W": self._tables.writer}
            try:
                # An upsert: creates the hint, or marks an existing one as this writer's.
                result = await self._tables.retry(
                    "write a hint",
                    functools.partial(
                        self._tables.index.upsert_entity, hint, mode=UpdateMode.MERGE
                    ),
                    write=True,
                )
                self._live[partition] = str(result.get("etag") or "")
            finally:
                del self._writing[partition]
                done.set_result(None)

    def touch(self, partition: str) -> None:
        self.touched[partition] = time.monotonic()

    def prune(self, listed: set[str], before: float) -> None:
        """Forget when partitions without a hint were last touched, once that is old."""
        self.touched = {p: t for p, t in self.touched.items() if p in listed or t >= before}

    def forget(self, partition: str) -> None:
        self._live.pop(partition, None)
        self.touched.pop(partition, None)

    async def drop_timers(self, keys: list[str]) -> None:
        """Delete timer hints whose messages were consumed (idempotent)."""
        for chunk in chunks(sorted(set(keys)), BATCH_OPS):
            ops = [("delete", {"PartitionKey": TIMERS, "RowKey": k}) for k in chunk]
            try:
                await self._tables.retry(
                    "drop timer hints",
                    functools.partial(self._tables.index.submit_transaction, ops),
                    write=True,
                )
            except HttpResponseError as exc:
                if status_of(exc) != 404:
                    raise
                for op in ops:
                    await self._delete(TIMERS, op[1]["RowKey"], None)

    async def build(self) -> None:
        """Hints for work written before this hub had an index (a hub of an earlier
        version of the store): one scan of the hub table, once. The mark is written
        last, so an interrupted build is done again at the next open."""
        if await self._tables.read_row(*BUILT, table=self._tables.index) is not None:
            return
        rows = await self._tables.query(
            "RowKey ge @lo and RowKey lt @hi",
            {"lo": "i", "hi": "x"},
            select=["PartitionKey", "RowKey", "VisibleAt"],
        )
        live = {
            r["PartitionKey"]
            for r in rows
            if r["RowKey"][0] == "w" or (r["RowKey"][0] == "i" and not r.get("VisibleAt"))
        }
        timers = [r for r in rows if r["RowKey"][0] == "i" and r.get("VisibleAt")]
        await self._write_hints(live - set(self._live), [dict(r) for r in timers])
        await self._tables.retry(
            "mark the index built",
            lambda: self._tables.index.upsert_entity(
                {"PartitionKey": BUILT[0], "RowKey": BUILT[1]}
            ),
            write=True,
        )

    # --- readers ------------------------------------------------------------------------

    async def live_hints(self) -> list[Any]:
        return await self._tables.query(
            "PartitionKey eq @pk", {"pk": LIVE}, select=["RowKey", "W"], table=self._tables.index
        )

    async def timers(
        self, *, up_to: str | None = None, after: str | None = None, top: int | None = None
    ) -> list[Any]:
        """Timer hints due at or before ``up_to``, or due after ``after`` (the first
        ``top`` of them), in time order."""
        if up_to is not None:
            flt, params = "PartitionKey eq @pk and RowKey lt @hi", {"hi": up_to + _AFTER_TIME}
        else:
            flt, params = (
                "PartitionKey eq @pk and RowKey ge @lo",
                {"lo": (after or "") + _AFTER_TIME},
            )
        rows = await self._tables.query(
            flt, {"pk": TIMERS, **params}, select=["RowKey"], table=self._tables.index, top=top
        )
        return sorted(rows, key=lambda r: r["RowKey"])

    def version(self, partition: str) -> int:
        return self._version.get(partition, 0)

    def quiet_since(self, partition: str, version: int) -> bool:
        """No writer added work to the partition since ``version`` was read, nor is adding."""
        return partition not in self._busy and self.version(partition) == version

    def knows(self, partition: str, etag: str) -> bool:
        """Is this the live hint as this process last wrote or checked it?"""
        return self._live.get(partition) == etag

    def learn(self, partition: str, etag: str) -> None:
        self._live[partition] = etag

    def distrust(self, which: Callable[[str], bool]) -> None:
        """Forget what this process knows of the live hints of the partitions ``which``
        names: it learned them while another host owned them, and that owner may have
        dropped a hint since (a writer that trusted the memory would add work without
        its hint)."""
        self._live = {p: e for p, e in self._live.items() if not which(p)}

    async def drop_live(self, partition: str, etag: str | None, version: int) -> None:
        """Delete a live hint found without work, unless a writer came meanwhile."""
        if not self.quiet_since(partition, version):
            return
        self._live.pop(partition, None)  # before the delete: later writers write it again
        await self._delete(LIVE, partition, etag)

    async def drop_stale_timers(self, keys: list[str], partition: str, version: int) -> None:
        if keys and self.quiet_since(partition, version):
            await self.drop_timers(keys)

    async def _delete(self, pk: str, rk: str, etag: str | None) -> None:
        async def attempt() -> None:
            try:
                if etag:
                    await self._tables.index.delete_entity(
                        pk, rk, etag=etag, match_condition=MatchConditions.IfNotModified
                    )
                else:
                    await self._tables.index.delete_entity(pk, rk)
            except ResourceNotFoundError:
                pass
            except HttpResponseError as exc:
                if status_of(exc) != 412:  # rewritten meanwhile: it stays
                    raise

        await self._tables.retry("drop a hint", attempt, write=True)
