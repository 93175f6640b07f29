"""Attempts: poison counting, the counts a commit or a start makes in advance, the start
hand-over, and the version gate before an attempt.

Poison: before each episode or entity batch the store counts one more attempt
(``begin_attempt``; a commit resets it). A commit that schedules an activity of the
instance counts its next attempt (the step) in advance, in its own transaction
(``count_next``; not with ``poison_attempts`` 1), and the engine runs the next episode
without a write of its own; so does a start on a store that can (``count_first``), whose
first episode then also takes the start message from memory (``started``). A run that
dies is counted all the same, and a graceful stop gives back the advance counts it did
not use (``_release_counted``). (A crash while no episode of the instance ran - in its
activity, or before its first episode - leaves that advance count standing, so it adds one
attempt at most, once per commit or start.) Work that kills the process every time, or
fails every time, reaches ``poison_attempts`` and is quarantined: the orchestration fails
(or each entity operation fails) with a reason naming the poison, its messages are
consumed, and nothing runs it again. A failure of the storage itself (``StoreError``: a
full disk, an outage) is not the work's fault: the attempt it ended does not count - the
next attempt reuses its count (``_uncounted``) instead of counting again - so a store that
recovers never turns into quarantined instances.

Versions (``versioning.py``): before an attempt is counted, the engine checks the
instance's version against this host's policy (``_version_verdict``). A version it must not
run is, with ``Reject``, *parked*: nothing is read further, consumed, counted or written,
the instance's status shows why, and scans that find its waiting messages again do not
take it for ``Parking.RECHECK_SECONDS``. With ``Fail`` the episode fails the instance
instead of running its code.

Memory: the advance counts and handed-over starts are bounded by ``MAX_COUNTED_AHEAD``
instances; forgetting one costs only the count write it would have saved.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from durable_host.core import orchestration, versioning
from durable_host.core.records import InstanceRecord, OutgoingKind, RuntimeStatus
from durable_host.engine.ready import ReadySet
from durable_host.functions.config import HostConfig
from durable_host.store.base import Store

log = logging.getLogger("durable_host.engine")
MAX_COUNTED_AHEAD = 100_000  # instances whose next attempt a commit counted (memory bound)


class Attempts(ReadySet):
    """The attempt ledger of the engine (a base of ``engine.Engine``, above the ready set)."""

    store: Store
    config: HostConfig
    now: Callable[[], str]
    poison_attempts: int
    step_commits: bool

    def __init__(self) -> None:
        super().__init__()
        # Instances whose last commit here counted their next attempt: the commit's time.
        self._counted: dict[str, str] = {}
        # Starts committed here that counted their first attempt: the start's time, the
        # message's inbox id and the message, for the first episode (``started``).
        self._starts: dict[str, tuple[str, int, dict[str, Any]]] = {}
        # Instances whose last attempt a store error ended: its count, for the next attempt.
        self._uncounted: dict[str, int] = {}

    async def _release_counted(self, deadline: float) -> None:
        """Give back the attempts commits counted in advance for episodes that never began:
        a graceful stop is no crash, so it must not bring an instance nearer to poison."""
        counted, self._counted = list(self._counted), {}
        if not counted:
            return
        releases = [self.store.release_attempt(instance_id) for instance_id in counted]
        remaining = max(0.1, deadline - asyncio.get_running_loop().time())
        try:
            async with asyncio.timeout(remaining):
                outcomes = await asyncio.gather(*releases, return_exceptions=True)
        except TimeoutError:
            log.warning("stop: %d attempts counted in advance were left counted", len(counted))
            return
        failed = sum(isinstance(outcome, BaseException) for outcome in outcomes)
        if failed:
            log.warning("stop: %d attempts counted in advance were left counted", failed)

    def counts_first(self, start: dict[str, Any]) -> bool:
        """Whether a start may count its first episode's attempt in advance and hand its
        message over (``Store.create_instance``'s ``count_first``, then ``started``): as a
        commit counts the step after it (``_counts_next``), never with a single attempt
        allowed, and not for a version this host would leave untouched (a parked instance
        is not counted)."""
        return (
            self.step_commits
            and self.poison_attempts >= 2
            and not self._stopping
            and len(self._starts) < MAX_COUNTED_AHEAD
            and versioning.blocked(self.config.versioning, None, None, [start]) is None
        )

    def started(
        self, instance_id: str, message_id: int | None, start: dict[str, Any], now: str
    ) -> None:
        """An immediate start this host committed at ``now``. With the start message's inbox
        id (the store counted the first attempt with it) the first episode takes ``start``
        from here: it neither reads the inbox, nor counts, nor reads the history (a start
        leaves none) - unless it is not all there is to know (``_handed_start``)."""
        if message_id is None or self._stopping:
            self.notify(instance_id)
            return
        self._starts[instance_id] = (now, message_id, start)
        self._note_counted(instance_id, True, now)
        self._ready_up(instance_id)

    def _version_verdict(
        self,
        instance_id: str,
        record: InstanceRecord | None,
        messages: list[tuple[int, dict[str, Any]]],
    ) -> versioning.Verdict | None:
        """This host's verdict on the version of the code these messages would run."""
        verdict = versioning.blocked(
            self.config.versioning,
            record.status if record else None,
            record.version if record else None,
            [m for _, m in messages],
            record.name if record else "",
        )
        if verdict is None:
            self.parking.release(instance_id)
        elif not verdict.fail and self.parking.park(
            instance_id, verdict, self.now(), time.monotonic()
        ):
            log.warning("left untouched: %s", verdict.reason)
        return verdict

    async def _handed_start(
        self, instance_id: str
    ) -> tuple[InstanceRecord, float, tuple[int, dict[str, Any]]] | None:
        """The start message ``started`` handed over, with the instance record and the
        seconds its read took, when it is all there is to know: no message was told of since
        (``notify``) and nothing wrote the instance since its start (the record is the
        start's own). None: the episode reads the inbox and counts, as for any message."""
        handed = self._starts.pop(instance_id, None)
        if handed is None or instance_id in self._inbox:
            return None
        at, message_id, message = handed
        record, read = await self._read_record(instance_id)
        if record is None or record.updated_at != at:
            return None
        return record, read, (message_id, message)

    async def _read_record(self, instance_id: str) -> tuple[InstanceRecord | None, float]:
        """The instance record for an episode, and the seconds its read took."""
        reading = time.perf_counter()
        record = await self.store.episode_record(instance_id)
        return record, time.perf_counter() - reading

    async def _count_attempt(
        self, instance_id: str, record: InstanceRecord | None
    ) -> tuple[int, str | None]:
        """Count this attempt (unless a store error ended the last one: it takes its
        place; or this host's last commit of the instance counted it already, and nothing
        wrote the instance since); the count, and past the bound, the reason the instance is
        quarantined."""
        attempts = self._uncounted.pop(instance_id, None)
        if attempts is None:
            counted = self._counted.pop(instance_id, None)
            if counted is not None and record is not None and counted == record.updated_at:
                attempts = 1
            else:
                attempts = await self.store.begin_attempt(instance_id)
        if attempts <= self.poison_attempts:
            if attempts > 1:
                log.warning("attempt %d: the previous attempt did not finish", attempts)
            return attempts, None
        return attempts, (
            f"quarantined as poison after {attempts - 1} attempts that did not finish"
            " (the host process died, or processing failed, every time)"
        )

    def _counts_next(self, record: InstanceRecord | None, episode: orchestration.Episode) -> bool:
        """Whether the commit counts the next episode's attempt in advance: for a running
        instance whose next episode is most likely a step this host runs (it scheduled an
        activity). A crash before that episode (in the activity) leaves the advance count
        standing - one attempt more than happened - so never with a single attempt allowed,
        and never while only other instances' work is awaited (a crash there is not this
        instance's doing; its next episode counts for itself)."""
        if not self.step_commits or self.poison_attempts < 2:
            return False
        status = episode.status or (record.status if record else None)
        return status == RuntimeStatus.RUNNING and any(
            item.kind == OutgoingKind.ACTIVITY for item in episode.outbox
        )

    def _note_counted(self, instance_id: str, counted: bool, now: str) -> None:
        self._counted.pop(instance_id, None)
        if counted:
            if len(self._counted) >= MAX_COUNTED_AHEAD:
                self._counted.clear()  # forgetting costs only a count write per instance
            self._counted[instance_id] = now
