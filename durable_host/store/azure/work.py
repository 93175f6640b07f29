"""Activity work items: rows ``w<id>`` in their instance's partition.

A work item is written by its episode's commit already handed to the engine of this
process (``DequeueCount`` 1), which runs it at once. Work found otherwise - after a
restart, or written by another process - is claimed with ``mark_dequeued`` (read, then
MERGE of the count If-Match), so a count above 1 means an earlier run was interrupted;
``release`` undoes one claim after a graceful stop.

``complete`` deletes the work item and adds its result message in **one transaction**
(both live in the instance's partition): a second completion finds the work item gone and
reports ``False``, so each work item gets exactly one completion. The result message
carries a nonce, so a retry after a lost response recognises its own result.

``handed`` remembers which work items this process gave its engine (``poll`` reports only
the others) and ``_partition_of`` where each lives (claims and releases need no lookup).

Several hosts on one hub share the work items: a work item's **claimer** is ``C`` (written
by a claim) or, before any claim, ``W`` (the host whose commit created it, handed to its
own engine) while its count is above 0. A claim expires with its claimer's heartbeat
(``membership``): ``is_live`` says whether a host id is a live member other than this one.
A claim also counts for ``CLAIM_GRACE`` seconds after it was made, whoever made it, unless
its claimer's heartbeat was seen to stop (``is_dead``). Its age is read on the service's
clock: the row's ``Timestamp`` (the Table service stamps every write) against
``store_now`` (this host's reading of the service's clock, ``HubPartitions.store_time``);
a host that has no reading yet (no heartbeat of its own answered) counts every claim.
``CT`` (the claimer's wall time) marks a claim, is what hosts of the earlier version judge
by, and keeps a claim counting while it is recent on this host's wall clock too (``_recent``:
a wall clock can only make a claim count longer here, never shorter). A claim that does not
count is logged with both clocks' readings.
A work item claimed by a live other host is neither adopted nor claimed here (a claim then
answers 0, as for a work item already gone); a released one (``C`` empty: abandoned at a
stop, or waiting for a slot on the host that created it) is anyone's - but a host leaves
alone a work item of an activity its app does not define (``leaves``) while another host
is live: with versions side by side, an activity only the newer version has is run by a
host of that version (``docs/versioning.md``).
"""

from __future__ import annotations

import functools
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

from azure.core import MatchConditions
from azure.core.exceptions import HttpResponseError, ResourceNotFoundError
from azure.data.tables import UpdateMode

from durable_host.core.records import ActivityWork
from durable_host.ops import faults
from durable_host.store.azure.codec import (
    item_id,
    partition_key,
    work_row_key,
)
from durable_host.store.azure.commit import CommitProtocol
from durable_host.store.azure.errors import StoreConflictError, is_transient, status_of
from durable_host.store.azure.rows import HubRows
from durable_host.store.azure.tables import HubTables

log = logging.getLogger("durable_host.store.azure")
CLAIM_GRACE = 25.0  # seconds a claim counts without its claimer's heartbeat seen
MAX_CLAIM_ATTEMPTS = 10  # a work item that keeps changing under a claim is a conflict


class WorkItems:
    """The store's activity operations (see the module docstring)."""

    def __init__(self, tables: HubTables, rows: HubRows, commits: CommitProtocol) -> None:
        self._tables = tables
        self._rows = rows
        self._commits = commits
        self._partition_of: dict[int, str] = {}
        self.handed: set[int] = set()  # work ids given to the engine by this process
        # Partitions whose completion found the work item gone (another run completed it):
        # ``poll`` surveys them soon, so a result nobody announced here is not left waiting.
        self.recheck: set[str] = set()
        self.is_live: Callable[[str], bool] = lambda _host: False  # one host: nobody else
        self.is_dead: Callable[[str], bool] = lambda _host: False
        self.store_now: Callable[[], float | None] = lambda: None  # the service's time
        self.leaves: Callable[[str], bool] = lambda _name: False  # an activity left to others

    def claimed_elsewhere(self, row: Any) -> bool:
        """Is the work item claimed by a live host other than this one?"""
        claimer = row.get("C")
        if claimer is None and int(row.get("DequeueCount", 0)) > 0:
            claimer = row.get("W")
        if not claimer or claimer == self._tables.writer:
            return False
        # A claim younger than a heartbeat's lifetime counts even from a host this one has
        # not seen yet (it joined since the last balancing round).
        # Not from a host whose heartbeat was seen to stop (``ownership.Silence``).
        recent = self._recent(row)
        counts = (recent and not self.is_dead(str(claimer))) or self.is_live(str(claimer))
        if not counts and float(row.get("CT", 0) or 0):
            stamped = getattr(row, "metadata", {}).get("timestamp")
            log.warning(
                "work item %s: the claim of %s does not count (recent %s, dead %s; stamped %s,"
                " service time %s, claimed at %s, wall %s)",
                row.get("RowKey"),
                claimer,
                recent,
                self.is_dead(str(claimer)),
                stamped.timestamp() if stamped else None,
                self.store_now(),
                row.get("CT"),
                time.time(),
            )
        return counts

    def _recent(self, row: Any) -> bool:
        """Was the claim on ``row`` made less than ``CLAIM_GRACE`` ago? On the service's clock
        (the row's ``Timestamp`` against this host's reading of it; True without a reading),
        or by the claimer's wall time ``CT`` on this host's: either says so, the claim counts.
        The wall-clock half only ever keeps a claim longer (a claimer whose wall clock runs
        ahead, never seen beating by this host, holds its work for its grace in its own
        time); it is there because a claim taken from a live host is an activity run twice,
        and once, under a loaded test run, the service-clock half alone let a claim a
        fraction of a second old be taken."""
        claimed_at = float(row.get("CT", 0) or 0)
        if not claimed_at:
            return False  # no claim written (a creator's own work item, or released)
        if time.time() - claimed_at < CLAIM_GRACE:
            return True
        stamped = getattr(row, "metadata", {}).get("timestamp")
        now = self.store_now()
        if stamped is None or now is None:
            return True
        return now - stamped.timestamp() < CLAIM_GRACE

    def hand_over(self, works: list[ActivityWork], partition: str) -> None:
        """Work items a commit created, which this process's engine runs at once."""
        for work in works:
            self._partition_of[work.work_id] = partition
            self.handed.add(work.work_id)

    def take_back(self, works: list[ActivityWork]) -> None:
        """Undo ``hand_over`` for a commit that failed: if its rows exist after all, ``poll``
        finds them and claims them like any work written elsewhere."""
        for work in works:
            self._partition_of.pop(work.work_id, None)
            self.handed.discard(work.work_id)

    def settled(self, work_ids: list[int]) -> None:
        """Work items a step's commit completed (``commit_step``): no longer handed."""
        for work_id in work_ids:
            self._partition_of.pop(work_id, None)
            self.handed.discard(work_id)

    def forget(self, partition: str) -> None:
        """Forget the work items of a purged instance."""
        for work_id in [w for w, p in self._partition_of.items() if p == partition]:
            self._partition_of.pop(work_id, None)
            self.handed.discard(work_id)

    # --- completion --------------------------------------------------------------------

    async def complete(self, work_id: int, instance_id: str, message: dict[str, Any]) -> bool:
        partition = partition_key(instance_id)
        for _ in range(5):
            _, row = await self._rows.inbox_row(partition, message)
            row["N"] = uuid.uuid4().hex
            faults.hit("store.before_commit")
            # The result is new work for the instance's owner. Another host's owner knows the
            # partition's live hint (it wrote it with the work item) and would survey it only
            # after ``STALE_SECONDS``: a host that does not own it writes the hint around its
            # write (``adding``), and the new ETag makes the owner's next poll look.
            async with self._commits.index.adding([partition]):
                done = await self._tables.retry(
                    "complete an activity",
                    functools.partial(self._complete_once, partition, work_id, row),
                    write=True,
                )
            if done is not None:
                # Handed until the completion is settled: a completion that failed is retried
                # by the run that holds it, and ``poll`` must not start a second run meanwhile.
                self.handed.discard(work_id)
                if done:
                    self._partition_of.pop(work_id, None)
                else:
                    self.recheck.add(partition)
                return done
        raise StoreConflictError("could not allocate a message id")

    async def _complete_once(
        self, partition: str, work_id: int, row: dict[str, Any]
    ) -> bool | None:
        """Delete the work item and add the result in one transaction.

        True: this call completed it; False: it was already gone (another run reported);
        None: the result's id collided with another message, try again with a new id.
        """
        ops = [
            ("delete", {"PartitionKey": partition, "RowKey": work_row_key(work_id)}),
            ("create", row),
        ]
        try:
            await self._tables.table.submit_transaction(ops)
        except HttpResponseError as exc:
            if is_transient(exc):
                raise
            if await self._tables.nonce_of(partition, row["RowKey"]) == row["N"]:
                return True  # our earlier attempt applied; its response was lost
            return None if status_of(exc) == 409 else False
        self._tables.faults.hit("complete")
        return True

    # --- finding work ------------------------------------------------------------------

    async def adopt(self, rows: list[Any]) -> list[ActivityWork]:
        """The work items visible ``rows`` describe, now handed to this process's engine."""
        found: list[ActivityWork] = []
        for row in sorted(rows, key=lambda r: r["RowKey"]):
            if self.claimed_elsewhere(row):
                continue  # another live host runs it
            if self.leaves(str(row.get("Name", ""))):
                continue  # this app does not define it: a host of another version does
            work = await self._rows.work_item(row)
            found.append(work)
            self._partition_of[work.work_id] = row["PartitionKey"]
            self.handed.add(work.work_id)
        return found

    def is_handed(self, row: Any) -> bool:
        return item_id(row["RowKey"]) in self.handed

    def partitions_running(self) -> set[str]:
        """Partitions with work items this process's engine holds right now."""
        return {self._partition_of[w] for w in self.handed if w in self._partition_of}

    async def _find_partition(self, work_id: int) -> str | None:
        partition = self._partition_of.get(work_id)
        if partition is not None:
            return partition
        rows = await self._tables.query(
            "RowKey eq @rk", {"rk": work_row_key(work_id)}, select=["PartitionKey"]
        )
        return rows[0]["PartitionKey"] if rows else None

    # --- claims ------------------------------------------------------------------------

    async def mark_dequeued(self, work_id: int) -> int:
        """Claim a work item: the new dequeue count (0: the work item is gone)."""
        partition = await self._find_partition(work_id)
        if partition is None:
            return 0
        faults.hit("store.before_commit")
        for _ in range(MAX_CLAIM_ATTEMPTS):
            count = await self._tables.retry(
                "count a dequeue",
                functools.partial(self._change_count, partition, work_id, +1),
                write=True,
            )
            if count is not None:
                if count == 0:
                    self.handed.discard(work_id)
                return count
        raise StoreConflictError(f"work item {work_id} kept changing")

    async def release(self, work_id: int) -> None:
        """Undo one dequeue: the run was abandoned by a graceful stop, it did not crash."""
        partition = await self._find_partition(work_id)
        if partition is None:
            return
        for _ in range(MAX_CLAIM_ATTEMPTS):
            count = await self._tables.retry(
                "release a work item",
                functools.partial(self._change_count, partition, work_id, -1),
                write=True,
            )
            if count is not None:
                return
        raise StoreConflictError(f"work item {work_id} kept changing")

    async def _change_count(self, partition: str, work_id: int, step: int) -> int | None:
        """Read the work item, then MERGE its dequeue count + ``step`` If-Match.

        The new count (0 if the work item is gone); None if it changed meanwhile (or our
        own lost response applied): read again.
        """
        try:
            row = await self._tables.table.get_entity(partition, work_row_key(work_id))
        except ResourceNotFoundError:
            return 0
        if step > 0 and self.claimed_elsewhere(row):
            return 0  # another live host claimed it: it runs there
        count = max(int(row.get("DequeueCount", 0)) + step, 0)
        claimer = self._tables.writer if step > 0 else ""  # a release makes it anyone's
        try:
            await self._tables.table.update_entity(
                {
                    "PartitionKey": partition,
                    "RowKey": row["RowKey"],
                    "DequeueCount": count,
                    "C": claimer,
                    "CT": time.time() if step > 0 else 0.0,
                },
                mode=UpdateMode.MERGE,
                etag=row.metadata["etag"],
                match_condition=MatchConditions.IfNotModified,
            )
        except ResourceNotFoundError:
            return 0
        except HttpResponseError as exc:
            if status_of(exc) == 412:
                return None
            raise
        return count
