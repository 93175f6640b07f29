"""The storage port: what the engine needs from a task hub, in domain terms. No SQL here.

A task hub holds, per instance, one row of status (``InstanceRecord``), the history of
its current execution, and an inbox of messages (events, starts, control messages,
entity operations), some of them invisible until a due time (durable timers). Activity
work items live in their own queue.

Contract (pinned by tests/store/test_store_contract.py, run against every
implementation):

* ``commit_episode`` applies an episode - inbox deletions, history append or replace,
  the status row and every outgoing message and activity - atomically: all or nothing.
* Activity work items written by ``commit_episode`` are created already handed (dequeue
  count 1), since the committing engine runs them at once; ``mark_activity_dequeued`` claims
  work found later (at start, or written by another process) and returns the new count, so
  a count above 1 means the item ran before and the host died.
* ``complete_activity`` removes the work item and enqueues its result in one atomic
  step, and does nothing if the work item is already gone: exactly one completion.
* ``commit_step`` is ``complete_activity`` of each completion and ``commit_episode`` of the
  episode that took them, in one atomic step: each work item is removed, a result the
  episode consumed is never written to the inbox (one it left waiting is), and the episode
  is applied. If any of the work items is already gone it applies nothing and returns
  None (the results were reported by another run; the engine completes them one by one).
  It holds at most ``max_step_completions`` completions.
* ``create_instance`` checks the existing status and writes the row and the start
  message atomically; when a call returns, its write is durable.
* ``fetch_messages`` never fails on a message it cannot decode: it returns
  ``{"kind": "undecodable", "error": ..., "text": <first 200 chars>}`` in its place, so
  the engine can quarantine it. ``get_history`` raises ``CorruptHistoryError`` instead.
* ``begin_attempt`` counts, durably enough to survive a crash of the host process, one
  more attempt at an instance's next episode or entity batch; ``commit_episode``,
  ``commit_step`` and ``commit_entity`` reset the count (and ``purge`` forgets it). With
  ``count_next`` an episode's commit sets it to 1 instead: the instance's next episode is
  counted in advance, in the same transaction, so the engine that committed it can run
  that episode without a write of its own (and a run that dies before its commit is still
  counted); ``release_attempt`` undoes one count (a graceful stop gives back the advance
  counts it did not use: nothing crashed). Poison detection rests on it.
* ``commit_episode`` with ``rewrite_history`` replaces the whole history with
  ``episode.events`` (same execution: a rewind) and clears the output.
* ``send`` with ``status`` also sets the instance's runtime status, in the same atomic
  write (a rewind answers 202 with the instance already ``Pending``, as DTFx does).
* ``release_activity`` undoes one ``mark_activity_dequeued`` (a graceful stop abandoned
  the run; it did not crash).
* ``updated_at`` of an instance changes with every commit that touches it (the engine's
  history cache relies on it to notice changes made elsewhere).
* ``poll`` waits, then returns the work this process was not told about: instances with
  visible messages and activity work items written by another process (or left behind).
  The engine calls it in a loop from start to stop, so it paces itself and never raises.
  A store only its own process writes (SQLite: one host per file) has no such work: its
  ``poll`` never returns.
* ``purge_many`` removes only instances in a terminal state, whatever the query says (as
  the extension's stores do): a filter never deletes a running instance.
* ``ready_instances`` lists instances in arrival order: the one whose oldest visible
  message is oldest comes first, so work accepted in order resumes in order after a crash.
* Failures of the storage itself raise ``StoreError``: the work did not fail, the store
  did, and the engine retries without counting it towards poison. ``StoreLostError``
  (a ``StoreError``) means the store can no longer be used by this process at all (another
  host took it over, the file was removed or replaced, the file is corrupt): the store
  refuses every later call and the host stops.
* ``round_trips`` counts the storage requests sent so far, for ``/admin/host/metrics`` and
  ``bench/``; None for a store that makes none worth counting (an embedded file).
* Host secrets (the host's keys, ``durable_host/http/keys.py``) are small named texts kept with
  the hub, so a restarted or standby host sees the same ones. ``get_secret`` returns the
  stored text or None; ``swap_secret`` writes ``value`` only if the stored text still equals
  ``expected`` (None: only if absent) and says whether it did: a compare-and-swap, so two
  hosts (or a host and the ``keys`` command) never overwrite each other's change. Both work
  on a store opened read-only, for the ``keys`` command beside a running host.
* Timer-trigger schedule status (``durable_host/triggers/timer.py``): one small JSON text per
  timer function (last and next occurrence, when it was updated). ``get_schedule`` returns
  it or None; ``swap_schedule`` is a compare-and-swap like ``swap_secret``, so of two hosts
  that claim one occurrence exactly one succeeds (the singleton of each occurrence).

Every member below is required: the engine calls each of them unconditionally.
"""

from __future__ import annotations

from typing import Any, Protocol

from durable_host.core.records import (
    ActivityWork,
    Completion,
    EntityCommit,
    Episode,
    InstanceRecord,
    Query,
    QueryPage,
)

__all__ = [
    "ActivityWork",
    "Completion",
    "CorruptHistoryError",
    "EntityCommit",
    "Episode",
    "InstanceExistsError",
    "InstanceRecord",
    "Query",
    "QueryPage",
    "Store",
    "StoreError",
    "StoreLockedError",
    "StoreLostError",
    "UnitLostError",
]


class InstanceExistsError(Exception):
    def __init__(self, instance_id: str, status: str):
        super().__init__(
            f"An instance with ID '{instance_id}' already exists and is in the {status} state."
        )
        self.instance_id = instance_id
        self.status = status


class StoreError(Exception):
    """The storage failed, not the work: retry later; never a reason to call work poison."""


class StoreLockedError(StoreError):
    """Another host owns the store (at start: this host refuses or waits)."""


class StoreLostError(StoreError):
    """This process can no longer use the store: it must stop writing and stop serving."""


class UnitLostError(StoreError):
    """This host does not (or no longer) own the partition of the instance it was about to
    write: nothing was written. The engine drops the instance from memory; the partition's
    owner runs it (a store several hosts share, ``ownership.py``)."""


class CorruptHistoryError(ValueError):
    """A stored history event cannot be decoded: the instance cannot be replayed."""

    def __init__(self, instance_id: str, position: int | str, error: str):
        super().__init__(
            f"history event {position} of instance '{instance_id}' could not be decoded ({error})"
        )
        self.instance_id = instance_id
        self.position = position


class Store(Protocol):
    @property
    def round_trips(self) -> int | None: ...

    async def open(self) -> None: ...
    async def close(self) -> None: ...

    async def create_instance(
        self,
        record: InstanceRecord,
        start_message: dict[str, Any],
        overridable: tuple[str, ...],
        visible_at: str | None = None,
        *,
        count_first: bool = False,
    ) -> int | None:
        """Create (or restart) the instance with ``start_message`` in its inbox. With
        ``count_first`` a store may also count the first episode's attempt in the same
        transaction, as a commit's ``count_next`` does, and then returns the start message's
        inbox id: the engine hands the message to that episode, which neither reads the
        inbox nor counts. None: nothing counted (a shared store, where another host may take
        the instance, reads and counts as for any message)."""
        ...

    async def send(
        self, instance_id: str, message: dict[str, Any], now: str, status: str | None = None
    ) -> None: ...

    async def get_instance(self, instance_id: str) -> InstanceRecord | None: ...

    async def episode_record(self, instance_id: str) -> InstanceRecord | None:
        """What ``get_instance`` answers, for the engine's next episode: a store may answer
        from its own record of the rows it committed, where no other writer can change them
        unseen (one host per SQLite file); a shared store reads."""
        ...

    async def get_history(self, instance_id: str) -> list[dict[str, Any]]: ...

    async def fetch_messages(
        self, instance_id: str, now: str, limit: int = 1000
    ) -> list[tuple[int, dict[str, Any]]]: ...

    @property
    def max_step_completions(self) -> int: ...

    async def commit_episode(
        self, instance_id: str, episode: Episode, now: str, *, count_next: bool = False
    ) -> list[ActivityWork]: ...

    async def commit_step(
        self,
        instance_id: str,
        completions: list[Completion],
        episode: Episode,
        now: str,
        *,
        count_next: bool = False,
    ) -> list[ActivityWork] | None: ...

    async def commit_entity(self, commit: EntityCommit) -> None: ...

    async def complete_activity(
        self, work_id: int, instance_id: str, message: dict[str, Any], now: str
    ) -> bool: ...

    async def pending_activities(self) -> list[ActivityWork]: ...

    async def mark_activity_dequeued(self, work_id: int) -> int: ...

    async def release_activity(self, work_id: int) -> None: ...

    async def begin_attempt(self, instance_id: str) -> int: ...

    async def release_attempt(self, instance_id: str) -> None: ...

    async def ready_instances(self, now: str, due_only: bool = False) -> list[str]: ...

    async def next_due(self, now: str) -> str | None: ...

    async def query(self, query: Query) -> QueryPage: ...

    async def purge(self, instance_id: str) -> int: ...

    async def purge_many(self, query: Query) -> int: ...

    async def poll(self) -> tuple[list[str], list[ActivityWork]]: ...

    async def get_secret(self, name: str) -> str | None: ...

    async def swap_secret(self, name: str, expected: str | None, value: str) -> bool: ...

    async def get_schedule(self, name: str) -> str | None: ...

    async def swap_schedule(self, name: str, expected: str | None, value: str) -> bool: ...
