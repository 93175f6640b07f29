"""The commit protocol: how one commit becomes visible at once, and what happens after it.

``docs/azure-storage.md`` ("The commit protocol") walks through every step and what a
crash after it leaves behind; the names below are the ones it uses.

* **Commit point.** Every write to a head row is the commit point of its operation: one
  transaction whose first operation is the head, REPLACE conditional on the ETag read at
  the start of the episode (or a create for a new instance), carrying a fresh token
  (``Tok``) and the next sequence (``Seq``) - ``commit_point``.
* **Small commits** (``_plan_one_transaction``): the head, new history rows, own new
  messages and work items, outbox index rows, deletions of the consumed messages and the
  attempts reset fit one transaction (100 operations, 4 MiB). Messages for *other*
  instances cannot join it: they are staged before it.
* **Large commits** (``_stage_everything``): the whole history under a fresh generation,
  every new row staged, index rows naming them; the head write alone commits it all.
* **Staging.** A staged row carries ``Tok``/``Src``/``SrcSeq``; readers show it only once
  its sender's head carries that token and sequence (``is_visible``), so nothing staged is
  visible before the commit point. Staged rows of an aborted attempt are deleted by the
  readers that find them, conditionally on the ETag they read.
* **After the commit** the head's ``Pending`` flags (``PostCommit``) name idempotent work -
  release staged rows, delete consumed messages, old history generations and the messages
  of an earlier life - done at once (``after_commit``) and, if interrupted, before the
  instance's next commit (``settle``). So at most one commit's staged rows per sender are
  ever unreleased.
* **Hints.** Before anything is staged, ``HubIndex.adding`` writes the index hints the
  commit's new work needs (live hints for immediate work, timer hints for delayed
  messages), so work never exists without a hint (``index.py``).
* **Lost responses.** A retried commit that the service rejects is resolved by reading the
  head: if it carries this commit's token, the first attempt applied (``_committed``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from dataclasses import dataclass, field
from typing import Any

from azure.core import MatchConditions
from azure.core.exceptions import AzureError, HttpResponseError, ResourceNotFoundError
from azure.data.tables import UpdateMode

from durable_host.ops import faults
from durable_host.store.azure.attempts import reset_attempts
from durable_host.store.azure.codec import (
    BATCH_BYTES,
    BATCH_OPS,
    HEAD_ROW,
    INBOX_ROWS,
    OUTBOX_INDEX_ROWS,
    Head,
    PostCommit,
    chunks,
    generation_rows,
    inbox_row_key,
    instance_id_of,
    new_generation,
    outbox_index_commit,
    outbox_index_row_key,
    pending_work,
    row_size,
)
from durable_host.store.azure.errors import (
    AzureStoreError,
    StoreConflictError,
    WorkItemGoneError,
    is_transient,
)
from durable_host.store.azure.index import HubIndex
from durable_host.store.azure.rows import HubRows
from durable_host.store.azure.tables import HubTables, Operation

log = logging.getLogger("durable_host.store.azure")

REFS_PER_INDEX_ROW = 200
RECENT_RECORDS = 4096  # heads kept for reads of the instance record


@dataclass
class Commit:
    """Everything one commit writes, before it is planned into requests."""

    partition: str
    head: Head | None  # as read before the commit: its ETag is the commit's condition
    new_head: dict[str, Any]  # the complete new head row
    events: list[dict[str, Any]]  # history events to append (to a new execution if fresh)
    fresh_history: bool
    own_rows: list[dict[str, Any]]  # rows for this partition: work items, own messages
    remote_rows: list[dict[str, Any]]  # inbox rows for other partitions
    consumed: list[int]  # consumed inbox message ids
    # Work items whose results this commit reports (``commit_step``): deleted in the commit
    # transaction, which fails (nothing applied) if one is gone.
    completed_work: list[str] = field(default_factory=list)
    attempts: int = 0  # the attempts row after the commit (1: the next episode is counted)
    token: str = ""
    seq: int = 0
    etag: str = ""  # the new head's, from the commit's response
    # An owner's commit (an episode, a step, an entity batch): fenced by the partition's
    # lease and stamped with its epoch. False: a write any host may make (a start).
    fenced: bool = True


class CommitProtocol:
    """Commits, the post-commit work they leave, and the visibility of staged rows."""

    def __init__(self, tables: HubTables, rows: HubRows, index: HubIndex) -> None:
        self._tables = tables
        self._rows = rows
        self.index = index
        self._fetched_heads: dict[str, Head | None] = {}  # head as the episode's fetch read it
        self._finished: dict[str, str] = {}  # partition -> token whose post-commit work is done
        # The stored head of instances this process fetched or committed lately: every
        # owner's head write goes through the partition's owner, which replaces or drops its
        # entry (all are dropped when this host takes or gives up a partition:
        # ``forget_heads``),
        # so reads of the record (the engine's after a fetch, status requests) need no
        # request. Bounded: the oldest entries go first.
        self.fetched_records: dict[str, Head] = {}

    # --- the head a commit is conditional on -------------------------------------------

    def remember_fetched_head(self, partition: str, head: Head | None) -> None:
        """The head a fetch read: the episode's commit is conditional on its ETag."""
        self._fetched_heads[partition] = head

    def remember_record(self, partition: str, head: Head) -> None:
        self.fetched_records.pop(partition, None)
        self.fetched_records[partition] = head
        while len(self.fetched_records) > RECENT_RECORDS:
            self.fetched_records.pop(next(iter(self.fetched_records)))

    def forget_fetched_head(self, partition: str) -> None:
        self._fetched_heads.pop(partition, None)

    def forget_heads(self) -> None:
        """Ownership changed: drop every remembered head. Those of a partition given up
        are its next owner's to write; those of a partition just taken may have been
        remembered while another host owned it (a start made here) and be stale."""
        self._fetched_heads.clear()
        self.fetched_records.clear()

    def forget(self, partition: str) -> None:
        """Forget a purged instance."""
        self._fetched_heads.pop(partition, None)
        self.fetched_records.pop(partition, None)
        self._finished.pop(partition, None)

    async def head_for_commit(self, partition: str) -> Head | None:
        """The head to commit on top of, its last commit settled: as fetched, else as this
        process last committed it (its ETag came back with the commit), else read now."""
        if partition in self._fetched_heads:
            head = self._fetched_heads.pop(partition)
        else:
            known = self.fetched_records.get(partition)
            head = known if known is not None and known.etag else None
            if head is None:
                head = await self._tables.read_head(partition)
        self._tables.check_epoch(partition, head)
        await self.settle(partition, head)
        return head

    # --- committing --------------------------------------------------------------------

    def stamp(self, commit: Commit) -> None:
        """Give the commit its token and sequence and reset the previous commit's marks."""
        head = commit.head
        if commit.fenced:
            epoch = self._tables.owner_epoch(commit.partition)
        else:
            epoch = head.epoch if head is not None else 0  # not the owner's write: keep it
        commit.token = uuid.uuid4().hex
        commit.seq = (head.commit_seq if head is not None else 0) + 1
        for key in ("Consumed", "ConsumedBlob", "OldGen", "Pending"):
            commit.new_head.pop(key, None)
        commit.new_head.update(Seq=commit.seq, Tok=commit.token, Epoch=epoch, W=self._tables.writer)
        if commit.fresh_history and head is not None and head.generation and head.history_count > 0:
            commit.new_head["OldGen"] = head.generation

    async def apply(self, commit: Commit) -> None:
        """Hint, stage what cannot join the commit transaction, commit, then finish."""
        rows = commit.own_rows + commit.remote_rows
        async with self.index.adding(_live_targets(rows), rows):
            self.stamp(commit)
            ops = await self._plan_one_transaction(commit)
            if ops is None:
                ops = await self._stage_everything(commit)
            faults.hit("store.before_commit")  # crash point: staged, not committed
            if commit.completed_work:
                faults.hit("store.before_step_commit")
            await self.commit_point(commit, ops)
        self.index.touch(commit.partition)
        await self.after_commit(commit)

    async def _plan_one_transaction(self, commit: Commit) -> list[Operation] | None:
        """The commit as one transaction, with remote messages staged; None if too large."""
        new, head = commit.new_head, commit.head
        operations = len(commit.events) + len(commit.own_rows) + len(commit.consumed)
        if operations + len(commit.completed_work) + 2 > BATCH_OPS:
            return None  # too many operations whatever their size: do not build rows twice
        if commit.fresh_history or head is None:
            generation, base = new_generation(), 0
        else:
            generation, base = head.generation, head.history_count
        history = [
            await self._rows.history_row(commit.partition, generation, base + i, e)
            for i, e in enumerate(commit.events)
        ]
        index = await self._index_rows(commit, commit.remote_rows)
        ops: list[Operation] = [("create", r) for r in (*history, *commit.own_rows, *index)]
        ops += [
            ("delete", {"PartitionKey": commit.partition, "RowKey": inbox_row_key(i)})
            for i in commit.consumed
        ]
        ops += _final_operations(commit)
        size = sum(row_size(op[1]) for op in ops) + row_size(new)
        if len(ops) + 1 > BATCH_OPS or size > BATCH_BYTES:
            return None
        new.update(Gen=generation, Count=base + len(commit.events))
        new["Pending"] = pending_work(
            bool(commit.remote_rows) and PostCommit.RELEASE,
            "OldGen" in new and PostCommit.OLD_GENERATION,
        )
        await self._stage(commit, commit.remote_rows)
        return ops

    async def _stage_everything(self, commit: Commit) -> list[Operation]:
        """Write every row before the commit point, invisible until the head names them."""
        head, new = commit.head, commit.new_head
        if commit.fresh_history or head is None:
            old: list[dict[str, Any]] = []
        else:
            old = await self._rows.current_history(commit.partition, head)
        generation = new_generation()
        events = [*old, *commit.events]
        history = await asyncio.gather(
            *(
                self._rows.history_row(commit.partition, generation, i, e)
                for i, e in enumerate(events)
            )
        )
        await self._write_own_rows(commit.partition, list(history))
        marked = commit.own_rows + commit.remote_rows
        await self._stage(commit, marked)
        index = await self._index_rows(commit, marked)
        await self._write_own_rows(commit.partition, index)
        fresh = commit.fresh_history
        if head is not None and head.generation and head.history_count > 0 and not fresh:
            new["OldGen"] = head.generation
        new.update(Gen=generation, Count=len(events))
        await self._tables.put_text(new, "Consumed", json.dumps(commit.consumed))
        new["Pending"] = pending_work(
            PostCommit.RELEASE,
            PostCommit.CONSUMED,
            "OldGen" in new and PostCommit.OLD_GENERATION,
        )
        return _final_operations(commit)

    async def _stage(self, commit: Commit, rows: list[dict[str, Any]]) -> None:
        """Mark rows with the commit and write them: own rows batched, others one by one."""
        for row in rows:
            row.update(Tok=commit.token, Src=commit.partition, SrcSeq=commit.seq)
        own = [r for r in rows if r["PartitionKey"] == commit.partition]
        await self._write_own_rows(commit.partition, own)
        await asyncio.gather(
            *(self._tables.upsert_staged(r) for r in rows if r["PartitionKey"] != commit.partition)
        )

    async def _write_own_rows(self, partition: str, rows: list[dict[str, Any]]) -> None:
        """Upsert rows of one partition in transactions that respect the limits."""
        batches: list[list[Operation]] = [[]]
        size = 0
        for row in rows:
            this_size = row_size(row)
            if len(batches[-1]) >= BATCH_OPS or size + this_size > BATCH_BYTES:
                batches.append([])
                size = 0
            batches[-1].append(("upsert", row, {"mode": UpdateMode.REPLACE}))
            size += this_size
        await asyncio.gather(*(self._tables.transact(b) for b in batches if b))

    async def _index_rows(self, commit: Commit, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Outbox index rows naming ``rows``, so the release can find them after the commit."""
        refs = [[r["PartitionKey"], r["RowKey"]] for r in rows]
        index: list[dict[str, Any]] = []
        for n, chunk in enumerate(chunks(refs, REFS_PER_INDEX_ROW)):
            row = {
                "PartitionKey": commit.partition,
                "RowKey": outbox_index_row_key(commit.seq, commit.token, n),
            }
            await self._tables.put_text(row, "Refs", json.dumps(chunk))
            index.append(row)
        return index

    async def commit_point(self, commit: Commit, ops: list[Operation]) -> None:
        """The one conditional write that makes the commit visible, exactly once."""
        head, new = commit.head, commit.new_head
        if head is not None:
            first: Operation = (
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
                answers = await self._tables.table.submit_transaction([first, *ops])
            except HttpResponseError as exc:
                if is_transient(exc):
                    raise
                if await self._committed(commit):
                    return  # a retry of a commit whose first response was lost
                if await self._work_gone(commit):
                    raise WorkItemGoneError(commit.partition) from None
                raise StoreConflictError(
                    f"instance {instance_id_of(commit.partition)} changed since it was read"
                    f" ({exc.status_code})"
                ) from None
            commit.etag = str(answers[0].get("etag") or "") if answers else ""
            self._tables.faults.hit("commit")

        try:
            fence = commit.partition if commit.fenced else None
            await self._tables.retry("commit", attempt, write=True, fence=fence)
        except BaseException:
            # Its outcome may be unknown: reads of the record go to the table again.
            self.fetched_records.pop(commit.partition, None)
            raise

    async def _committed(self, commit: Commit) -> bool:
        """Did a commit whose outcome we did not see happen? Runs inside a retry attempt."""
        try:
            row = await self._tables.table.get_entity(commit.partition, HEAD_ROW)
        except ResourceNotFoundError:
            return False
        return bool(row.get("Tok") == commit.token)

    async def _work_gone(self, commit: Commit) -> bool:
        """Is one of the work items a refused step commit deletes already gone?"""
        for row_key in commit.completed_work:
            try:
                await self._tables.table.get_entity(commit.partition, row_key, select=["RowKey"])
            except ResourceNotFoundError:
                return True
        return False

    async def after_commit(self, commit: Commit) -> None:
        """Do the commit's post-commit work now; the next commit does it if this fails."""
        # With its ETag the head is also what the next commit is conditional on: a step
        # whose fetch was skipped commits without reading it.
        self.remember_record(commit.partition, Head.of(dict(commit.new_head), commit.etag))
        if commit.new_head.get("Pending"):
            head = Head.of(commit.new_head, "")
            try:
                await self._finish(commit.partition, head)
            except (AzureError, AzureStoreError) as exc:
                # Committed all the same: the next commit of this instance finishes it.
                log.warning(
                    "post-commit work for %s deferred: %s", instance_id_of(commit.partition), exc
                )
        else:
            self._finished.pop(commit.partition, None)

    # --- post-commit work --------------------------------------------------------------

    async def settle(self, partition: str, head: Head | None) -> None:
        """Finish the last commit's post-commit work unless this process already did."""
        if head is not None and head.pending and self._finished.get(partition) != head.commit_token:
            await self._finish(partition, head)

    async def _finish(self, partition: str, head: Head) -> None:
        """Idempotent: release staged rows, delete consumed messages, drop old generations."""
        flags = head.pending
        if PostCommit.RELEASE in flags:
            await self._release(partition, head)
        if PostCommit.CONSUMED in flags:
            ids = json.loads(await self._tables.get_text(head.row, "Consumed") or "[]")
            await self._tables.delete_rows(partition, [inbox_row_key(i) for i in ids])
        if PostCommit.OLD_GENERATION in flags and head.old_generation:
            rows = await self._tables.query_rows(
                partition, *generation_rows(head.old_generation), select=["RowKey"]
            )
            await self._tables.delete_rows(partition, [r["RowKey"] for r in rows])
        if PostCommit.FLOOR in flags:
            rows = await self._tables.query_rows(
                partition, INBOX_ROWS[0], inbox_row_key(head.inbox_floor), select=["RowKey"]
            )
            await self._tables.delete_rows(partition, [r["RowKey"] for r in rows])
        self._finished[partition] = head.commit_token

    async def _release(self, partition: str, head: Head) -> None:
        """Clear ``Tok`` on every row the head's commit staged, then drop its index rows."""
        index = await self._tables.query_rows(partition, *OUTBOX_INDEX_ROWS)
        for row in index:
            seq, token = outbox_index_commit(row["RowKey"])
            if seq > head.commit_seq:
                continue  # a commit attempt still in flight elsewhere
            if token == head.commit_token:
                refs = json.loads(await self._tables.get_text(row, "Refs") or "[]")
                await asyncio.gather(*(self._release_row(p, r) for p, r in refs))
            # Index rows of other tokens belong to aborted attempts (or to released commits
            # whose index deletion was interrupted); the rows they name are left to readers,
            # who drop aborted ones conditionally (``is_visible``).
            await self._tables.delete_row(partition, row["RowKey"])

    async def _release_row(self, partition: str, row_key: str) -> None:
        async def attempt() -> None:
            try:  # a merge never recreates a row its receiver already consumed
                await self._tables.table.update_entity(
                    {"PartitionKey": partition, "RowKey": row_key, "Tok": ""},
                    mode=UpdateMode.MERGE,
                )
            except ResourceNotFoundError:
                pass

        await self._tables.retry("release a staged row", attempt, write=True)

    # --- what readers see --------------------------------------------------------------

    async def is_visible(self, row: Any, heads: dict[str, Head | None]) -> bool:
        """A staged row is visible once its sender's head carries its token and sequence.

        A staged row whose sender has committed that sequence (or a later one) with
        another token belongs to an aborted commit: it is deleted, conditionally on the
        ETag read, so a row released meanwhile survives. ``heads`` caches head rows by
        PartitionKey for one scan.
        """
        token = row.get("Tok") or ""
        if not token:
            return True
        sender_partition, staged_seq = row["Src"], int(row["SrcSeq"])
        if sender_partition not in heads:
            heads[sender_partition] = await self._tables.read_head(sender_partition)
        sender = heads[sender_partition]
        if sender is not None and sender.commit_seq == staged_seq and sender.commit_token == token:
            return True
        if sender is not None and sender.commit_seq >= staged_seq:
            self._tables.spawn(
                self._tables.delete_row(row["PartitionKey"], row["RowKey"], row.metadata["etag"])
            )
        return False


def _final_operations(commit: Commit) -> list[Operation]:
    """What the commit-point transaction carries besides the head in both shapes: the
    attempts row and the deletion of the work items whose results the commit reports."""
    return [
        reset_attempts(commit.partition, commit.attempts),
        *(
            ("delete", {"PartitionKey": commit.partition, "RowKey": key})
            for key in commit.completed_work
        ),
    ]


def _live_targets(rows: list[dict[str, Any]]) -> set[str]:
    """Partitions that get immediate work (messages without a due time, work items): each
    needs a live hint; delayed messages get timer hints (``HubIndex.adding``)."""
    return {r["PartitionKey"] for r in rows if not r.get("VisibleAt")}
