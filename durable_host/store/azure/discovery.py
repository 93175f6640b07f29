"""Discovery through the index: ready instances, due timers, pending work and ``poll``.

Nothing here scans the hub table. Each operation lists hints from the index table
(``index.py``: live hints, timer hints) and reads the partition of each instance a hint
names (``survey``: one query of its inbox and work rows - never its history), which is the
double check a hint needs: a hint may outlive its work, work never outlives its hint.
A survey that finds a hint without work removes it (``reconcile``).

* ``ready_instances``: surveys the instances of every live hint and of every due timer
  hint (``due_only``: due timer hints only); arrival order by the oldest visible message.
* ``next_due``: the first timer hint after now: one query of the index, no survey.
* ``pending_activities``: surveys the instances of every live hint.
* ``poll`` finds work this process was not told about: it lists the live hints and
  surveys those it did not write or check itself (written by another process), those of
  instances this process has not worked on for ``STALE_SECONDS`` (a dispatch was lost, e.g.
  a commit reported as failed that had applied) and those ``recheck`` names (a completion
  that found its work item already gone). It waits ``POLL_MIN`` before each round,
  doubling up to ``POLL_MAX`` while nothing foreign turns up.

With several hosts on the hub (``partitions.py``) each reports only the instances and
activity work items of any partition that no other live host claims (``work.py``), but
only the instances of the partitions it owns (``owns``); only an owner drops a hint.
When it takes a partition (``taken``), its next ``poll`` comes at once and surveys every
live hint and due timer of it (the previous owner left them), as a start does.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from datetime import UTC, datetime
from typing import Any

from azure.core.exceptions import AzureError

from durable_host.core import history as h
from durable_host.core.records import ActivityWork
from durable_host.store.azure.codec import (
    INBOX_ROWS,
    WORK_ROWS,
    Head,
    PostCommit,
    instance_id_of,
    item_id,
)
from durable_host.store.azure.commit import CommitProtocol
from durable_host.store.azure.errors import AzureStoreError
from durable_host.store.azure.index import HubIndex, Survey, parse_timer_key
from durable_host.store.azure.tables import HubTables
from durable_host.store.azure.work import WorkItems

log = logging.getLogger("durable_host.store.azure")

POLL_MIN, POLL_MAX = 0.2, 10.0
STALE_SECONDS = 30.0  # instances untouched this long are surveyed again by ``poll``


class Discovery:
    """The store's discovery operations (see the module docstring)."""

    def __init__(
        self, tables: HubTables, commits: CommitProtocol, work: WorkItems, index: HubIndex
    ) -> None:
        self._tables = tables
        self._commits = commits
        self._work = work
        self._index = index
        self._poll_delay = POLL_MIN
        self._checked: dict[str, float] = {}  # partition -> when ``poll`` last surveyed it
        self._rescan = False  # a partition was taken: survey every hint it has
        self._woken: asyncio.Event | None = None

    def owns(self, partition: str) -> bool:
        fence = self._tables.fence
        return fence is None or fence.owns(partition)

    def taken(self) -> None:
        """A partition was taken: the next poll comes at once and surveys all of its work."""
        self._rescan = True
        self._poll_delay = POLL_MIN
        if self._woken is not None:
            self._woken.set()

    # --- surveys -----------------------------------------------------------------------

    async def survey(self, partition: str, now: str) -> Survey:
        """One read of an instance's inbox and work rows (and its head), classified."""
        head, _, rows = await self._tables.read_partition(partition, INBOX_ROWS[0], WORK_ROWS[1])
        found = Survey(partition, head)
        consumed: set[int] = set()
        if head is not None and PostCommit.CONSUMED in head.pending:
            consumed = set(json.loads(await self._tables.get_text(head.row, "Consumed") or "[]"))
        floor = head.inbox_floor if head is not None else 0
        heads: dict[str, Head | None] = {partition: head}
        for row in sorted(rows, key=lambda r: r["RowKey"]):
            key = row["RowKey"]
            if key.startswith(WORK_ROWS[0]):
                found.has_live = True
                if await self._commits.is_visible(row, heads):
                    found.work.append(row)
                continue
            if not key.startswith(INBOX_ROWS[0]):
                continue  # outbox index rows
            message_id = item_id(key)
            if message_id < floor or message_id in consumed:
                continue
            found.inbox_keys.add(key)
            visible_at = row.get("VisibleAt") or ""
            if not visible_at:
                found.has_live = True  # delayed messages have timer hints of their own
            elif visible_at > now:
                continue
            if await self._commits.is_visible(row, heads):
                found.visible.append(row)
        return found

    async def _surveyed(
        self,
        now: str,
        live: dict[str, str | None],
        timers: dict[str, list[str]],
        *,
        shared: bool = False,
    ) -> list[Survey]:
        """Survey every named partition and reconcile its hints with what was found.
        Only those of owned partitions unless ``shared`` (activity work is anyone's)."""
        partitions = sorted(p for p in set(live) | set(timers) if shared or self.owns(p))

        async def one(partition: str) -> Survey:
            version = self._index.version(partition)
            found = await self.survey(partition, now)
            await self._reconcile(found, live.get(partition), timers.get(partition, []), version)
            return found

        return list(await asyncio.gather(*(one(p) for p in partitions)))

    async def _reconcile(
        self, found: Survey, etag: str | None, timer_keys: list[str], version: int
    ) -> None:
        """Drop hints the survey found without work; remember the live hint otherwise."""
        partition = found.partition
        stale = [k for k in timer_keys if parse_timer_key(k)[2] not in found.inbox_keys]
        await self._index.drop_stale_timers(stale, partition, version)
        if etag is None:
            return
        if not self.owns(partition):
            self._index.learn(partition, etag)  # only its owner drops a hint
            return
        if found.has_live:
            self._index.learn(partition, etag)
        else:
            await self._index.drop_live(partition, etag, version)

    # --- the port's discovery operations -----------------------------------------------

    async def ready_instances(self, now: str, due_only: bool) -> list[str]:
        timers = _by_partition(await self._index.timers(up_to=now))
        live: dict[str, str | None] = {}
        if not due_only:
            live = {r["RowKey"]: r.metadata["etag"] for r in await self._index.live_hints()}
        oldest: dict[str, str] = {}  # partition -> row key of its oldest visible message
        for found in await self._surveyed(now, live, timers):
            visible = found.visible
            if due_only:
                visible = [r for r in visible if r.get("VisibleAt")]
            if visible:
                oldest[found.partition] = visible[0]["RowKey"]
        # Arrival order (inbox ids grow with time): work accepted first resumes first.
        return [instance_id_of(p) for p in sorted(oldest, key=lambda p: (oldest[p], p))]

    async def next_due(self, now: str) -> str | None:
        rows = await self._index.timers(after=now, top=1)
        return parse_timer_key(rows[0]["RowKey"])[0] if rows else None

    async def backlog(self, now: str) -> list[Survey]:
        """A survey of every instance a live or due timer hint names, whoever owns it: a
        read only (no hint is dropped, nothing is handed), for the scale signal."""
        live = {r["RowKey"] for r in await self._index.live_hints()}
        timers = _by_partition(await self._index.timers(up_to=now))
        partitions = sorted(live | set(timers))
        return list(await asyncio.gather(*(self.survey(p, now) for p in partitions)))

    async def pending_activities(self) -> list[ActivityWork]:
        live = {r["RowKey"]: r.metadata["etag"] for r in await self._index.live_hints()}
        found = await self._surveyed(_now(), live, {}, shared=True)
        return await self._work.adopt([row for f in found for row in f.work])

    async def poll(self) -> tuple[list[str], list[ActivityWork]]:
        """Wait, then report work this process was not told about; never raises."""
        if self._woken is None:
            self._woken = asyncio.Event()
        try:
            await asyncio.wait_for(self._woken.wait(), self._poll_delay)
        except TimeoutError:
            pass
        self._woken.clear()
        try:
            instance_ids, works, foreign = await self._poll_once()
        except (AzureError, AzureStoreError) as exc:
            log.debug("poll failed: %s", exc)
            self._poll_delay = min(self._poll_delay * 2, POLL_MAX)
            return [], []
        busy = foreign or bool(works)
        self._poll_delay = POLL_MIN if busy else min(self._poll_delay * 2, POLL_MAX)
        return instance_ids, works

    async def _poll_once(self) -> tuple[list[str], list[ActivityWork], bool]:
        clock = time.monotonic()
        running = self._work.partitions_running()
        recheck, self._work.recheck = self._work.recheck, set()
        rescan, self._rescan = self._rescan, False
        live: dict[str, str | None] = {}
        foreign = set()
        hints = await self._index.live_hints()
        listed = {row["RowKey"] for row in hints}
        self._checked = {p: t for p, t in self._checked.items() if p in listed}
        self._index.prune(listed, clock - STALE_SECONDS)
        for row in hints:
            partition, etag = row["RowKey"], row.metadata["etag"]
            if rescan and self.owns(partition):
                foreign.add(partition)
            elif not self._index.knows(partition, etag):
                foreign.add(partition)  # written by another process, or not checked yet
            elif partition not in recheck and (
                partition in running
                or clock - self._index.touched.get(partition, 0.0) < STALE_SECONDS
                or clock - self._checked.get(partition, 0.0) < STALE_SECONDS
            ):
                continue
            live[partition] = etag
            self._checked[partition] = clock
        now = _now()
        timers: dict[str, list[str]] = {}
        if rescan:  # the due timers of the partitions this host owns (it may have just taken)
            due = _by_partition(await self._index.timers(up_to=now))
            timers = {p: keys for p, keys in due.items() if self.owns(p)}
        # Other partitions are surveyed for their activity work only (anyone's to claim).
        found = await self._surveyed(now, live, timers, shared=True)
        ready = sorted(
            instance_id_of(f.partition) for f in found if f.visible and self.owns(f.partition)
        )
        works = await self._work.adopt(
            [row for f in found for row in f.work if not self._work.is_handed(row)]
        )
        return ready, works, bool(foreign & {f.partition for f in found if f.visible or f.work})


def _by_partition(rows: list[Any]) -> dict[str, list[str]]:
    timers: dict[str, list[str]] = {}
    for row in rows:
        timers.setdefault(parse_timer_key(row["RowKey"])[1], []).append(row["RowKey"])
    return timers


def _now() -> str:
    return h.format_time(datetime.now(UTC))
