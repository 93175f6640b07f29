"""Balancing partitions among the hosts of one task hub: the IO shell around ``ownership``.

``Membership`` runs one round at ``join`` and then one every ``interval`` seconds (a third
of the lease): it renews the partitions it holds, announces this host (a heartbeat with
its version, draining flag and expiry), reads the live members and who holds which
partition, and applies ``ownership.plan``: releases the partitions above its fair share,
then tries to take its share from the free ones (or ones whose holder is no live member:
their leases lapse by themselves, so the attempt fails until then). ``leave`` (graceful
stop) announces draining, releases every partition at once and removes the heartbeat, so
the others take them at their next round instead of after the lease.

A host's death is seen sooner than its lease: between rounds a lighter loop rewrites this
host's heartbeat every ``beat`` seconds (a second by default) and lists the others'. A
member whose heartbeat has not changed for ``silence`` seconds (``ownership.Silence``, on
this host's own clock; the balancing interval by default, 5 s at the default lease) is
dead: a round runs at once, and it ``evict``s the dead member's partitions (the backend
releases their leases by the ids their holders wrote) and takes its share of them, instead
of waiting for the leases to lapse. A member that was only slow loses its partitions so;
its writes are refused from then on by the fence every commit already passes (an Azure
commit is conditional on the instance head's ETag and meets the new owner's epoch; a
PostgreSQL commit locks its partition row with its epoch), and it takes its share again
at its next rounds.

Versions side by side (``ownership.handovers``): before planning, a round hands over the
partitions where this host left instances of another version untouched (``parked``) and
a live host of that version could run them (one a round, or all its surplus over its fair
share at once): the partition's blob is marked with the
version and released, and a host that runs that version takes it at its next round (and
keeps it for ``dwell`` seconds at least, whatever its share).

The storage side is a ``Backend`` (the Azure store's ``HubPartitions``): leases,
heartbeats and the listing of both. Nothing here raises out of the loop: a failed round
is logged and the next one tries again; a partition whose renewal fails for good is lost
(the backend fences its writes from then on).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from durable_host.cluster.ownership import Member, Silence, handovers, plan, shares

log = logging.getLogger("durable_host.membership")


LEASE_SETTING = "DURABLE_HOST_LEASE_SECONDS"
SILENCE_SETTING = "DURABLE_HOST_SILENCE_SECONDS"


def seconds_setting(
    env: Mapping[str, str], name: str, default: float, low: int, high: int
) -> float:
    """A whole number of seconds from ``low`` to ``high``; unset or empty is ``default``;
    anything else is a ``ValueError`` naming the setting and the value."""
    text = env.get(name, "").strip()
    if not text:
        return default
    if not text.isdigit() or not low <= int(text) <= high:
        raise ValueError(
            f"{name}={text[:40]!r} is not a whole number of seconds from {low} to {high}"
        )
    return float(int(text))


def silence_setting(env: Mapping[str, str], lease: float) -> float:
    """``DURABLE_HOST_SILENCE_SECONDS`` (1-60): how long a heartbeat may stay unchanged
    before its host is dead; a third of the lease by default, 3 s at least (a host busy
    for a second or two is not dead)."""
    return seconds_setting(env, SILENCE_SETTING, max(3.0, lease / 3), 1, 60)


class Backend(Protocol):
    @property
    def units(self) -> Sequence[int]: ...

    def held(self) -> set[int]: ...

    async def beat(self, me: Member, ttl: float) -> None: ...

    async def forget(self, me: Member) -> None: ...

    async def members(self) -> list[Member]: ...

    async def holdings(self) -> dict[int, str | None]: ...

    async def acquire(self, unit: int, holder: str | None) -> bool: ...

    async def evict(self, unit: int, holder: str) -> bool: ...

    async def renew_all(self) -> None: ...

    async def release(self, unit: int) -> None: ...

    def wanted(self) -> dict[int, str]: ...

    def held_for(self) -> dict[int, float]: ...

    async def hand_over(self, unit: int, version: str) -> None: ...


class Membership:
    """One host's part in balancing (see the module docstring)."""

    def __init__(
        self,
        backend: Backend,
        me: Member,
        interval: float,
        *,
        lane: Callable[[Member], bool] | None = None,
        parked: Callable[[], Mapping[int, Sequence[str]]] | None = None,
        dwell: float | None = None,
        beat: float | None = None,
        silence: float | None = None,
    ) -> None:
        """``lane``: which members share this host's partitions (all by default);
        ``parked``: per held partition, the versions of the instances this host left
        untouched there; ``dwell``: how long a partition stays before it is handed over or
        given back (two rounds by default); ``beat``: seconds between heartbeats (a
        third of ``silence``, at most 1 s); ``silence``: seconds without a changed
        heartbeat that make a member dead (``interval`` by default)."""
        self.backend = backend
        self.me = me
        self.interval = interval
        self.lane = lane or (lambda _m: True)
        self.parked = parked
        self.dwell = interval * 2 if dwell is None else dwell
        self.silence = Silence(interval if silence is None else silence)
        self.beat = min(1.0, self.silence.silence / 3) if beat is None else beat
        self.ttl = interval * 3 + 5.0
        self.dead: set[str] = set()
        self._wake = asyncio.Event()
        self._beats: asyncio.Task[None] | None = None
        self._called: dict[int, float] = {}  # unit -> when it was taken, handed to us
        self.draining = False
        self.rounds = 0
        self.last_members: list[Member] = []
        self.last_holdings: dict[int, str | None] = {}
        self._task: asyncio.Task[None] | None = None

    async def join(self) -> None:
        """The first round (this host takes what is free), then the loop."""
        await self.round()
        self._task = asyncio.create_task(self._loop())
        self._beats = asyncio.create_task(self._beat_loop())

    def is_dead(self, member: str) -> bool:
        """Judged dead by its silent heartbeat and not seen beating since."""
        return self.silence.is_dead(member)

    async def _listing(self) -> list[Member]:
        """The members of this lane, with the dead ones judged (``self.dead``) and left
        out of ``last_members``."""
        members = [m for m in await self.backend.members() if self.lane(m)]
        self.dead = self.silence.observe(members, self.me.id, time.monotonic())
        self.last_members = [m for m in members if m.id not in self.dead]
        return self.last_members

    async def round(self) -> None:
        backend = self.backend
        await backend.beat(self.me, ttl=self.ttl)
        members = await self._listing()
        holdings = await backend.holdings()
        wanted = backend.wanted()
        if not self.draining:
            for unit, holder in sorted(holdings.items()):
                if holder in self.dead and await backend.evict(unit, holder):
                    holdings[unit] = None
                    log.warning(
                        "partition %d evicted from %s: its heartbeat stopped %.0fs ago or more",
                        unit,
                        holder,
                        self.silence.silence,
                    )
        self.last_holdings = holdings
        others = [m for m in members if not m.draining and m.id != self.me.id]
        if self.parked is not None and not self.draining:
            parked = self.parked()
            # One a round, or all of this host's surplus over its fair share at once: a host
            # that was handed every partition while the other version idled gives those
            # back in one round when that version's work comes, not one every round.
            live = [m.id for m in members if not m.draining]
            share = shares(backend.units, live, holdings).get(self.me.id, 0)
            limit = max(1, len(backend.held()) - share)
            moves = handovers(
                parked, members, self.me.id, backend.held_for(), self.dwell, limit=limit
            )
            for unit, version in moves.items():
                await backend.hand_over(unit, version)
                holdings[unit], wanted[unit] = None, version
                log.info(
                    "partition %d handed over to a host of version %s: instances of that"
                    " version wait there",
                    unit,
                    version,
                )
        now = time.monotonic()
        self._called = {
            u: t for u, t in self._called.items() if now - t < self.dwell and u in backend.held()
        }
        move = plan(
            backend.units,
            [m.id for m in others],
            holdings,
            self.me.id,
            draining=self.draining,
            wanted=wanted,
            runs=self.me.runs,
            others_run=lambda version: any(m.runs(version) for m in others),
            keep=sorted(self._called),
        )
        for unit in move.release:
            await backend.release(unit)
            log.info("partition %d released: above this host's share of %d", unit, move.share)
        for unit in move.take:
            previous = holdings.get(unit)
            if await backend.acquire(unit, previous):
                how = "taken" if previous is None else f"stolen from {previous} (expired)"
                if unit in wanted and previous is None:
                    how = f"taken, handed over for version {wanted[unit]}"
                    self._called[unit] = time.monotonic()
                log.info("partition %d %s", unit, how)
        self.rounds += 1

    async def _loop(self) -> None:
        while True:
            # Jitter: hosts started together must not race every round in lockstep.
            try:
                await asyncio.wait_for(
                    self._wake.wait(), self.interval * (0.9 + 0.2 * random.random())
                )
            except TimeoutError:
                pass
            self._wake.clear()
            try:
                await self.backend.renew_all()
                await self.round()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the next round tries again
                log.warning("balancing round failed (next in %.0fs): %s", self.interval, exc)

    async def _beat_loop(self) -> None:
        """The heartbeat between rounds, and a round at once when a holder fell silent."""
        while True:
            await asyncio.sleep(self.beat)
            try:
                await self.backend.beat(self.me, ttl=self.ttl)
                await self._listing()
                if self.dead & set(self.last_holdings.values()):
                    self._wake.set()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the next beat tries again
                log.debug("heartbeat failed (next in %.1fs): %s", self.beat, exc)

    async def leave(self, timeout: float = 5.0) -> None:
        """Graceful stop: release every partition at once, remove the heartbeat."""
        self.draining = True
        tasks = [t for t in (self._task, self._beats) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        try:
            async with asyncio.timeout(timeout):
                for unit in sorted(self.backend.held()):
                    await self.backend.release(unit)
                    log.info("partition %d released: this host stops", unit)
                await self.backend.forget(self.me)
        except Exception as exc:  # noqa: BLE001 - the leases lapse by themselves
            log.warning("could not release every partition at stop: %s", exc)
