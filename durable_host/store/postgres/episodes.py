"""The PostgreSQL store's episode commits, and the rows they leave for the next episode.

``commit_episode`` and ``commit_step`` are one call each of the episode function
(``functions``): a step is two round trips (BEGIN with the call, COMMIT). The call answers
the row it left, which ``episode_record`` hands the instance's next episode instead of
reading it, while nothing can have written it since: other processes write an instance's
row only with a message that NOTIFYs (a restart of the id, a rewind) or by a purge, so a
kept row is dropped when the listener hears of the instance, by this process's own writes
(``PostgresStore``), and all of them when the listener's connection was lost or a
partition changed hands. The commit checks the row the episode was decided on is still
the stored one (``StaleRecordError`` otherwise: nothing applied), whether it was kept or
read, so a write nobody heard of is caught, never overwritten.
"""

from __future__ import annotations

import copy

from durable_host.core.records import (
    ActivityWork,
    Completion,
    Episode,
    InstanceRecord,
    OutgoingKind,
)
from durable_host.ops import faults
from durable_host.store.base import StoreError
from durable_host.store.postgres import functions as fn
from durable_host.store.postgres.database import Conn, Database, WorkGone
from durable_host.store.postgres.listen import Listener
from durable_host.store.postgres.partitions import HubPartitions
from durable_host.store.postgres.settings import PostgresSettings

MAX_RECORDS = 10_000  # instance rows kept for the next episode (memory bound)


class StaleRecordError(StoreError):
    """An episode's commit found its instance's row changed since the episode read it:
    nothing applied; the engine runs the episode again on the row as it is."""


class EpisodeCommits:
    """Episode commits and kept rows (module docstring): a base of ``PostgresStore``."""

    db: Database
    settings: PostgresSettings
    owner: str
    listener: Listener
    partitions: HubPartitions | None
    _handed: set[int]

    def __init__(self) -> None:
        # Rows this host's commits left, for the instances' next episodes.
        self._records: dict[str, InstanceRecord] = {}
        self._records_epoch = 0  # the listener's connection they were kept under
        # The updated_at of the row each instance's next episode was decided on.
        self._decided: dict[str, str | None] = {}

    def _owns(self, instance_id: str) -> bool:
        return self.partitions is None or self.partitions.owns(instance_id)

    def _touch(self, instance_id: str) -> None:
        raise NotImplementedError

    async def get_instance(self, instance_id: str) -> InstanceRecord | None:
        raise NotImplementedError

    async def episode_record(self, instance_id: str) -> InstanceRecord | None:
        """The record an episode is decided on: the row this host's last commit of the
        instance left, while nothing can have written it since (module doc), else read."""
        # An episode of an instance another host owns would fail at its commit: not begun.
        if self.partitions is not None and not self.partitions.owns(instance_id):
            self.partitions.check(instance_id)  # raises UnitLostError
        kept = self._kept().get(instance_id)
        record = (
            copy.copy(kept)
            if kept is not None and self.listener.listening
            else await self.get_instance(instance_id)
        )
        if len(self._decided) >= MAX_RECORDS:
            self._decided.clear()  # forgetting one costs only its commit's check
        self._decided[instance_id] = record.updated_at if record is not None else None
        return record

    def _kept(self) -> dict[str, InstanceRecord]:
        """The kept rows, none kept under an earlier listening connection (notifications
        may have been missed between two)."""
        if self._records_epoch != self.listener.epoch:
            self._records.clear()
            self._records_epoch = self.listener.epoch
        return self._records

    def _keep(self, instance_id: str, record: InstanceRecord | None) -> None:
        """Keep the row a commit of this host left for the instance's next episode."""
        records = self._kept()
        records.pop(instance_id, None)
        if record is None or not self.listener.listening:
            return
        records[instance_id] = record  # the newest last: the oldest go first
        while len(self._records) > MAX_RECORDS:
            self._records.pop(next(iter(self._records)))

    def _created(self, instance_id: str, works: list[ActivityWork]) -> list[ActivityWork]:
        self._touch(instance_id)
        self._handed.update(w.work_id for w in works)
        return works

    async def commit_episode(
        self, instance_id: str, episode: Episode, now: str, *, count_next: bool = False
    ) -> list[ActivityWork]:
        works = await self._commit("commit_episode", instance_id, [], episode, now, count_next)
        assert works is not None  # no completions: never gone
        return self._created(instance_id, works)

    async def commit_step(
        self,
        instance_id: str,
        completions: list[Completion],
        episode: Episode,
        now: str,
        *,
        count_next: bool = False,
    ) -> list[ActivityWork] | None:
        works = await self._commit(
            "commit_step", instance_id, completions, episode, now, count_next
        )
        if works is None:
            return None
        self._handed.difference_update(c.work_id for c in completions)
        return self._created(instance_id, works)

    async def _commit(
        self,
        operation: str,
        instance_id: str,
        completions: list[Completion],
        episode: Episode,
        now: str,
        count_next: bool,
    ) -> list[ActivityWork] | None:
        """One episode (a step: with its activity results) in one call of the episode
        function (``functions``); None: a result's work item was gone, nothing applied.
        The row the episode was decided on (``episode_record``) must still be the stored
        one: a row another process wrote meanwhile fails the commit, applying nothing."""
        expected = self._decided.pop(instance_id, None)
        notify = sorted(
            {m.target for m in episode.outbox if m.kind != OutgoingKind.ACTIVITY}
            - {t for t in {m.target for m in episode.outbox} if self._owns(t)}
        )

        async def body(
            conn: Conn, fence: tuple[int, int] | None
        ) -> tuple[int | None, fn.EpisodeOutcome]:
            args = fn.episode_args(
                fence,
                instance_id,
                expected,
                completions,
                episode,
                now,
                count_next,
                self.owner,
                self.settings.channel,
                notify,
            )
            cur = await conn.execute(fn.episode_call(), fn.packed(args))
            row = await cur.fetchone()
            assert row is not None
            answer = fn.EpisodeOutcome(row)
            if answer.outcome == "gone":
                raise WorkGone  # another run reported a result: nothing was written
            if answer.outcome == "stale":
                raise StaleRecordError(
                    f"instance {instance_id}: its row changed since the episode read it"
                    " (another process wrote it); the episode runs again"
                )
            if completions and answer.outcome == "ok":
                faults.hit("store.before_step_commit")  # the step's commit point is next
            return (None if answer.outcome == "lost" else answer.xid), answer

        try:
            answer = await self.db.call_begun(operation, body, fence=instance_id)
        except WorkGone:
            self._records.pop(instance_id, None)
            return None
        except BaseException:
            self._records.pop(instance_id, None)
            raise
        self._keep(instance_id, answer.record)
        return [
            ActivityWork(
                work_id, instance_id, p["execution_id"], p["task_id"], p["name"], p["input_json"], 1
            )
            for work_id, p in zip(
                answer.work_ids,
                [i.payload for i in episode.outbox if i.kind == OutgoingKind.ACTIVITY],
                strict=True,
            )
        ]
