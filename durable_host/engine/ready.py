"""The ready set: which instances the engine's workers take next, and when the timer loop looks.

Instances with visible inbox messages (or activity results handed over) are *ready*. The
set holds ids only - nothing is kept in memory for a waiting instance - and each id at most
once: an instance told of while a worker runs it is marked *dirty* and queued again when
that worker is done, so one instance never runs two episodes at once and no news is lost.
``_inbox`` remembers the instances told of stored messages since their last inbox read, so
an episode handed only results or a start need not read the inbox. Once the engine stops,
nothing is made ready: what is queued stays in the store for the next start.

What a commit produced is dispatched here (``_dispatch``): a message makes its target
ready, a message not yet visible (a timer) wakes the timer loop to recompute its sleep.
Instances parked for their version (``versioning.Parking``) are not taken again by a scan
(``rediscover``) until their recheck time; a message written through this host takes them.
"""

from __future__ import annotations

import asyncio
import time

from durable_host.core import orchestration, versioning
from durable_host.core.records import OutgoingKind


class ReadySet:
    """The engine's ready set (a base of ``engine.Engine``; no IO)."""

    def __init__(self) -> None:
        self.parking = versioning.Parking()  # instances left untouched for their version
        self._ready: asyncio.Queue[str] = asyncio.Queue()
        self._queued: set[str] = set()
        self._running: set[str] = set()
        self._dirty: set[str] = set()
        self._inbox: set[str] = set()  # instances told of stored messages since their fetch
        self._wake = asyncio.Event()
        self._stopping = False

    def notify(self, instance_id: str) -> None:
        """Mark an instance ready (it has, or may have, visible messages)."""
        if self._stopping:
            return
        self._inbox.add(instance_id)
        self._ready_up(instance_id)

    def _ready_up(self, instance_id: str) -> None:
        if self._stopping:
            return
        if instance_id in self._running:
            self._dirty.add(instance_id)
        elif instance_id not in self._queued:
            self._queued.add(instance_id)
            self._ready.put_nowait(instance_id)

    def rediscover(self, instance_id: str) -> None:
        """A scan found waiting messages again: take the instance unless it is parked."""
        if not self.parking.skips(instance_id, time.monotonic()):
            self.notify(instance_id)

    def wake_timers(self) -> None:
        self._wake.set()

    def _dispatch(self, outbox: list[orchestration.Outgoing], now: str) -> None:
        for item in outbox:
            if item.kind != OutgoingKind.MESSAGE:
                continue
            if item.visible_at is not None and item.visible_at > now:
                self.wake_timers()
            else:
                self.notify(item.target)
