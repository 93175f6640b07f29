"""Per-instance operations: create, send, read, and commit an episode or an entity batch.

Each write here ends in one commit point (``CommitProtocol``) or one conditional insert:

* ``create`` reads the head, checks its status against the overridable states, then
  commits head + start message in one transaction. A restarted id gets a fresh history
  generation and an inbox floor at the start message (older messages are invisible), and
  its commit leaves ``Pending`` work that deletes both.
* ``send`` is one insert carrying a nonce; with ``status`` (rewind), one transaction of
  head REPLACE (If-Match) + message.
* ``fetch_messages`` reads head, attempts row and inbox in one query and remembers the head:
  the episode's commit is conditional on its ETag. A message is visible when its id is at
  least the head's floor, it is not listed in ``Consumed``, its ``VisibleAt`` has passed,
  and (staged) its sender committed it.
* ``commit_episode`` / ``commit_entity`` turn what the core decided into a ``Commit``;
  ``commit_step`` adds activity results the episode took: their work items are deleted
  in the commit-point transaction (which fails, applying nothing, if one is gone), and a
  result the episode left waiting becomes an own inbox row.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import uuid
from typing import Any

from azure.core import MatchConditions
from azure.core.exceptions import AzureError, HttpResponseError, ResourceExistsError
from azure.data.tables import UpdateMode

from durable_host.core.records import (
    ActivityWork,
    Completion,
    EntityCommit,
    Episode,
    InstanceRecord,
    OutgoingKind,
    RuntimeStatus,
)
from durable_host.ops import faults
from durable_host.store.azure.attempts import EpisodeAttempts
from durable_host.store.azure.codec import (
    ATTEMPTS_ROW,
    HEAD_ROW,
    HISTORY_ROWS,
    INBOX_ROWS,
    Head,
    PostCommit,
    inbox_row_key,
    item_id,
    new_generation,
    partition_key,
    pending_work,
    work_row_key,
)
from durable_host.store.azure.commit import Commit, CommitProtocol
from durable_host.store.azure.errors import (
    AzureStoreError,
    RequestRejectedError,
    StoreConflictError,
    WorkItemGoneError,
    is_transient,
)
from durable_host.store.azure.index import timer_key
from durable_host.store.azure.rows import HubRows
from durable_host.store.azure.tables import HubTables
from durable_host.store.azure.work import WorkItems
from durable_host.store.base import InstanceExistsError
from durable_host.store.codec import decode_message, entity_name, parent_instance_id, writes_output

log = logging.getLogger("durable_host.store.azure")


class Instances:
    """The store's per-instance operations (see the module docstring)."""

    def __init__(
        self,
        tables: HubTables,
        rows: HubRows,
        commits: CommitProtocol,
        work: WorkItems,
        attempts: EpisodeAttempts,
    ) -> None:
        self._tables = tables
        self._rows = rows
        self._commits = commits
        self._work = work
        self._attempts = attempts
        # The head a fetch read, for the ``get`` that follows it (the engine reads the
        # record right after fetching, status requests may come in between). Every write
        # of a head goes through this process (the lease) and drops it, so until then it
        # is the stored head.
        self._records = commits.fetched_records
        # Due times of the delayed messages a fetch returned: a commit consuming them
        # drops their timer hints.
        self._fetched_timers: dict[str, dict[int, str]] = {}

    # --- create and send ---------------------------------------------------------------

    async def create(
        self,
        record: InstanceRecord,
        start_message: dict[str, Any],
        overridable: tuple[str, ...],
        visible_at: str | None,
    ) -> None:
        partition = partition_key(record.instance_id)
        for _ in range(5):
            head = await self._tables.read_head(partition)
            await self._commits.settle(partition, head)
            if head is not None and head.row.get("Status") not in overridable:
                raise InstanceExistsError(record.instance_id, str(head.row.get("Status")))
            message_id, start_row = await self._rows.inbox_row(partition, start_message, visible_at)
            new = await self._created_head(partition, record, message_id)
            commit = Commit(
                partition,
                head,
                new,
                events=[],
                fresh_history=True,
                own_rows=[start_row],
                remote_rows=[],
                consumed=[],
                fenced=False,  # any host may start an instance: its owner runs it
            )
            self._commits.stamp(commit)
            if head is not None:  # a restarted id starts clean: old history and messages go
                commit.new_head["Pending"] = pending_work(
                    "OldGen" in commit.new_head and PostCommit.OLD_GENERATION, PostCommit.FLOOR
                )
            live = [] if visible_at else [partition]
            try:
                async with self._commits.index.adding(live, [start_row]):
                    faults.hit("store.before_commit")
                    await self._commits.commit_point(commit, [("create", start_row)])
            except StoreConflictError:
                continue  # changed since read: check the status again
            await self._commits.after_commit(commit)
            return
        raise StoreConflictError(
            f"instance {record.instance_id} kept changing while it was created"
        )

    async def _created_head(
        self, partition: str, record: InstanceRecord, floor: int
    ) -> dict[str, Any]:
        new: dict[str, Any] = {
            "PartitionKey": partition,
            "RowKey": HEAD_ROW,
            "Name": record.name,
            "Status": record.status,
            "CreatedAt": record.created_at,
            "UpdatedAt": record.updated_at,
            "Gen": new_generation(),
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
        await self._tables.put_text(new, "Input", record.input_json)
        return new

    async def send(
        self, instance_id: str, message: dict[str, Any], now: str, status: str | None
    ) -> None:
        partition = partition_key(instance_id)
        for _ in range(5):
            head = await self._tables.read_head(partition) if status is not None else None
            _, row = await self._rows.inbox_row(partition, message)
            row["N"] = uuid.uuid4().hex
            faults.hit("store.before_commit")
            if head is None:
                attempt = functools.partial(self._insert_once, row, "send")
            else:
                new = {**head.row, "Status": status, "UpdatedAt": now}
                attempt = functools.partial(self._send_with_status, head, new, row)
            try:
                async with self._commits.index.adding([partition]):
                    sent = await self._tables.retry("send a message", attempt, write=True)
            finally:
                if head is not None:  # the head changed, or may have
                    self._records.pop(partition, None)
            if sent:
                return
        raise StoreConflictError(f"could not send to {instance_id}: it kept changing")

    async def _send_with_status(self, head: Head, new: dict[str, Any], row: dict[str, Any]) -> bool:
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
            await self._tables.table.submit_transaction(ops)
        except HttpResponseError as exc:
            if is_transient(exc):
                raise
            # No such row: the head changed since it was read; read it again.
            return await self._tables.nonce_of(row["PartitionKey"], row["RowKey"]) == row["N"]
        self._tables.faults.hit("send")
        return True

    async def _insert_once(self, row: dict[str, Any], point: str) -> bool:
        """Insert a row carrying a nonce ``N``; True once it is in the table (exactly once)."""
        try:
            await self._tables.table.create_entity(row)
        except ResourceExistsError:
            # Our own first attempt whose response was lost, or an id collision (another
            # nonce: try another id).
            return await self._tables.nonce_of(row["PartitionKey"], row["RowKey"]) == row["N"]
        self._tables.faults.hit(point)
        return True

    # --- reads -------------------------------------------------------------------------

    async def get(self, instance_id: str, *, remembered: bool = True) -> InstanceRecord | None:
        """The instance record; from the head this process remembers if ``remembered`` and
        it owns the instance's partition (only the owner writes the heads an episode
        changes; another host's memory of one is stale as soon as the owner commits, and
        is dropped when this host takes the partition)."""
        partition = partition_key(instance_id)
        fence = self._tables.fence
        owned = fence is None or fence.owns(partition)
        head = self._records.get(partition) if owned and remembered else None
        if head is None:
            head = await self._tables.read_head(partition)
        return None if head is None else await self._rows.instance_record(partition, head.row)

    async def history(self, instance_id: str) -> list[dict[str, Any]]:
        partition = partition_key(instance_id)
        for _ in range(5):
            head, attempts, rows = await self._tables.read_partition(partition, *HISTORY_ROWS)
            self._attempts.remember(partition, attempts)
            if head is None or not head.generation:
                return []
            events = await self._rows.history_events(head, rows)
            if events is not None:
                return events
        raise StoreConflictError(f"the history of {instance_id} kept changing while it was read")

    async def fetch_messages(
        self, instance_id: str, now: str, limit: int
    ) -> list[tuple[int, dict[str, Any]]]:
        partition = partition_key(instance_id)
        fence = self._tables.fence
        if fence is not None and not fence.owns(partition):
            return []  # another host owns it: nothing for this one to run
        head, attempts, rows = await self._tables.read_partition(partition, *INBOX_ROWS)
        self._attempts.remember(partition, attempts)
        self._tables.check_epoch(partition, head)
        await self._commits.settle(partition, head)
        consumed: set[int] = set()
        if head is not None and PostCommit.CONSUMED in head.pending:
            consumed = set(json.loads(await self._tables.get_text(head.row, "Consumed") or "[]"))
        floor = head.inbox_floor if head is not None else 0
        picked: list[tuple[int, Any]] = []
        heads: dict[str, Head | None] = {partition: head}
        for row in sorted(rows, key=lambda r: r["RowKey"]):
            message_id = item_id(row["RowKey"])
            if message_id < floor or message_id in consumed:
                continue
            if row.get("VisibleAt") and row["VisibleAt"] > now:
                continue
            if await self._commits.is_visible(row, heads):
                picked.append((message_id, row))
                if len(picked) >= limit:
                    break
        self._commits.index.touch(partition)
        if head is not None:
            self._commits.remember_record(partition, head)
        else:
            self._records.pop(partition, None)
        if picked:
            self._commits.remember_fetched_head(partition, head)
            self._fetched_timers[partition] = {
                i: r["VisibleAt"] for i, r in picked if r.get("VisibleAt")
            }
        else:
            self._commits.forget_fetched_head(partition)
            self._fetched_timers.pop(partition, None)
        texts = await asyncio.gather(*(self._tables.get_text(r, "M") for _, r in picked))
        return [(i, decode_message(t or "")) for (i, _), t in zip(picked, texts, strict=True)]

    # --- commits of what a core decided ------------------------------------------------

    async def commit_episode(
        self, instance_id: str, episode: Episode, now: str, count_next: bool
    ) -> list[ActivityWork]:
        created = await self.commit_step(instance_id, [], episode, now, count_next)
        assert created is not None, "without completions a commit never finds work gone"
        return created

    async def commit_step(
        self,
        instance_id: str,
        completions: list[Completion],
        episode: Episode,
        now: str,
        count_next: bool,
    ) -> list[ActivityWork] | None:
        """The episode and the activity results it took (``completions``), in one commit
        point; None (nothing applied) if a completion's work item is already gone."""
        partition = partition_key(instance_id)
        head = await self._commits.head_for_commit(partition)
        if head is None and not episode.replace_history:
            if completions:
                return None  # purged while its activity ran: the results have no instance
            # Messages for an instance that does not exist are dropped; nothing else changes.
            faults.hit("store.before_commit")
            await self._tables.delete_rows(partition, [inbox_row_key(i) for i in episode.consumed])
            await self._tables.delete_row(partition, ATTEMPTS_ROW)
            return []
        new = await self._episode_head(partition, head, episode, now)
        created, own, remote = await self._outgoing_rows(partition, episode)
        for completion in completions:
            if not completion.consumed:  # held (e.g. suspended): it waits in the inbox
                own.append((await self._rows.inbox_row(partition, completion.message))[1])
        commit = Commit(
            partition,
            head,
            new,
            events=list(episode.events),
            fresh_history=episode.replace_history or episode.rewrite_history or head is None,
            own_rows=own,
            remote_rows=remote,
            consumed=list(episode.consumed),
            completed_work=[work_row_key(c.work_id) for c in completions],
            attempts=1 if count_next else 0,
        )
        # Handed before the commit point: a ``poll`` that ran between the commit and the
        # hand-over would claim the new work items and run them a second time.
        self._work.hand_over(created, partition)
        try:
            await self._commits.apply(commit)
        except WorkItemGoneError:
            self._work.take_back(created)
            return None
        except BaseException:
            self._work.take_back(created)
            raise
        self._work.settled([c.work_id for c in completions])
        await self._drop_consumed_timers(partition, episode.consumed)
        return created

    async def _drop_consumed_timers(self, partition: str, consumed: list[int]) -> None:
        """After a commit: the timer hints of the delayed messages it consumed go. If this
        fails they stay, harmless: a survey finds their messages gone and drops them."""
        due = self._fetched_timers.pop(partition, {})
        keys = [timer_key(due[i], partition, inbox_row_key(i)) for i in consumed if i in due]
        if keys:
            try:
                await self._commits.index.drop_timers(keys)
            except (AzureError, AzureStoreError, RequestRejectedError) as exc:
                # Never an error of the commit, which applied: its work items are running.
                log.warning("timer hints of %s left for later: %s", partition, exc)

    async def _episode_head(
        self, partition: str, head: Head | None, episode: Episode, now: str
    ) -> dict[str, Any]:
        new = (
            dict(head.row)
            if head is not None
            else {
                "PartitionKey": partition,
                "RowKey": HEAD_ROW,
                "Status": RuntimeStatus.RUNNING,
                "CreatedAt": now,
            }
        )
        if episode.replace_history:
            parent = parent_instance_id(episode)
            for key, value in (
                ("ExecutionId", episode.execution_id),
                ("Name", episode.name),
                ("Version", episode.version),
                ("ParentInstanceId", parent),
            ):
                new.pop(key, None)
                if value is not None:
                    new[key] = value
            await self._tables.put_text(new, "Input", episode.input_json)
            await self._tables.put_text(new, "Output", None)
            await self._tables.put_text(new, "CustomStatus", None)
        new["UpdatedAt"] = now
        if episode.status is not None:
            new["Status"] = episode.status
        if writes_output(episode):
            await self._tables.put_text(new, "Output", episode.output_json)
        if episode.custom_status_changed:
            await self._tables.put_text(new, "CustomStatus", episode.custom_status_json)
        return new

    async def _outgoing_rows(
        self, partition: str, episode: Episode
    ) -> tuple[list[ActivityWork], list[dict[str, Any]], list[dict[str, Any]]]:
        """The episode's outbox as rows: work items and own messages, messages to others."""
        created: list[ActivityWork] = []
        own: list[dict[str, Any]] = []
        remote: list[dict[str, Any]] = []
        for item in episode.outbox:
            if item.kind == OutgoingKind.ACTIVITY:
                work, row = await self._rows.work_row(partition, item.payload)
                created.append(work)
                own.append(row)
                continue
            target = partition_key(item.target)
            _, row = await self._rows.inbox_row(target, item.payload, item.visible_at)
            (own if target == partition else remote).append(row)
        return created, own, remote

    async def commit_entity(self, commit: EntityCommit) -> None:
        partition = partition_key(commit.instance_id)
        head = await self._commits.head_for_commit(partition)
        new: dict[str, Any] = (
            dict(head.row)
            if head is not None
            else {
                "PartitionKey": partition,
                "RowKey": HEAD_ROW,
                "CreatedAt": commit.now,
                "Name": entity_name(commit.instance_id),
            }
        )
        new.update(UpdatedAt=commit.now, Status=RuntimeStatus.RUNNING, EntityExists=commit.exists)
        await self._tables.put_text(new, "EntityState", commit.state_json)
        remote: list[dict[str, Any]] = []
        own: list[dict[str, Any]] = []
        for target, message in commit.responses:
            _, row = await self._rows.inbox_row(partition_key(target), message)
            (own if row["PartitionKey"] == partition else remote).append(row)
        await self._commits.apply(
            Commit(
                partition,
                head,
                new,
                events=[],
                fresh_history=False,
                own_rows=own,
                remote_rows=remote,
                consumed=list(commit.consumed),
            )
        )
        await self._drop_consumed_timers(partition, list(commit.consumed))
        # The state is rewritten by every operation: once it lives in a blob, each commit
        # writes a new one (names are never reused), so the replaced one goes now, or a
        # bounded state would leave an unbounded trail of blobs behind it. Readers that
        # still hold the old row read the head again (``HubRows.instance_record``).
        replaced = head.row.get("EntityStateBlob") if head is not None else None
        if replaced and replaced != new.get("EntityStateBlob"):
            await self._tables.drop_blob(replaced)
