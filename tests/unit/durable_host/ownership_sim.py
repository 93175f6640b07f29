"""A simulated task hub for the model of the ownership protocol (``docs/ownership-model.md``).

``Hub`` is the store as the Azure provider uses it, reduced to what ownership depends on:
partition blobs with a lease (id, expiry) and metadata (``epoch``, ``owner``, ``lease``),
heartbeat blobs (a token that changes at every write, the hub's time of the write as its
Last-Modified, a time to live, and the writer's wall-clock ``expires`` that only hosts of
the earlier version read), instance heads (sequence, ETag, epoch of the writer) with an inbox, and activity work items
(``C``, the hub's ``Timestamp`` of the claim, ``W``). Every operation is applied atomically
at the hub's time ``now``, which is also the store's clock the hosts read.

``SimBackend`` is one host's ``membership.Backend`` over it, doing what
``store/azure/partitions.HubPartitions`` does request by request (a two-step acquire: the
lease, then the metadata with the raised epoch under it; renewals by lease id; eviction by the
lease id the last listing showed; a local lease deadline of sent time + duration - 3 s;
heartbeats judged on the hub's clock as read at this host's last answered heartbeat), and
``SimHost`` adds the fenced commit of an episode and the activity claim rule of
``store/azure/work.WorkItems``. Every request goes through ``Hub.send``, where the host's
next fault decides what the network does with it: deliver it (``ok``), lose it (``lost``),
apply it but lose the answer (``noreply``), or hold it and apply it later, after whatever
else happened meanwhile (``late``). A host cut off from the hub loses every request.

The real ``Membership``, ``ownership.plan``/``shares`` and ``ownership.Silence`` run on top;
only the store and the network are simulated. Ghost state (``Hub.ghost``) records what the
invariants need and no host can see.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from durable_host.cluster import membership
from durable_host.cluster.ownership import Member, StoreTime, fresh

LEASE = 15.0  # the Azure store's partition lease
MARGIN = 3.0  # partitions.LEASE_MARGIN: a host trusts its lease until sent + LEASE - MARGIN
INTERVAL = LEASE / 3  # a balancing round
SILENCE = 5.0  # membership.silence_setting at the default lease
CLAIM_GRACE = 25.0  # store/azure/work.CLAIM_GRACE


class Transient(Exception):
    """A request that got no answer: lost, answered too late, or held in the network."""


@dataclass
class Blob:
    lease_id: str | None = None
    expires: float = 0.0
    meta: dict[str, str] = field(default_factory=dict)

    def leased(self, now: float) -> bool:
        return self.lease_id is not None and now < self.expires


@dataclass
class Head:
    seq: int = 0
    etag: int = 0
    epoch: int = 0


@dataclass
class Work:
    instance: str
    creator: str
    claimer: str = ""
    claimed_at: float = 0.0  # the hub's time of the claim (the row's Timestamp)
    count: int = 1


@dataclass
class Ghost:
    """What the invariants check and no host sees."""

    epoch_owner: dict[tuple[int, int], str] = field(default_factory=dict)
    commits: dict[str, list[tuple[str, int, int, frozenset[int]]]] = field(default_factory=dict)
    consumed: dict[int, int] = field(default_factory=dict)  # message -> times consumed
    completions: dict[int, list[str]] = field(default_factory=dict)
    beats_landed: dict[str, list[tuple[float, int]]] = field(default_factory=dict)  # (t, seq)
    violations: list[str] = field(default_factory=list)


class Hub:
    def __init__(self, partitions: int, instances: int) -> None:
        self.now = 0.0
        self.units = list(range(partitions))
        self.blobs = {u: Blob() for u in self.units}
        # host -> (token, Last-Modified on the hub's clock, ttl, expires on the writer's wall)
        self.beats: dict[str, tuple[int, float, float, float]] = {}
        self.instances = [f"i{n}" for n in range(instances)]
        self.heads = {i: Head() for i in self.instances}
        self.inbox: dict[str, set[int]] = {i: set() for i in self.instances}
        self.works: dict[int, Work] = {}
        self.late: list[Callable[[], Any]] = []
        self.ghost = Ghost()
        self._ids = itertools.count(1)

    def new_id(self) -> int:
        return next(self._ids)

    def unit_of(self, instance: str) -> int:
        return int(instance[1:]) % len(self.units)

    def send(self, host: SimHost, apply: Callable[[], Any]) -> Any:
        fault = "lost" if host.cut else host.next_fault()
        if fault == "lost":
            raise Transient("request lost")
        if fault == "late":
            self.late.append(apply)
            raise Transient("request held in the network")
        result = apply()
        if fault == "noreply":
            raise Transient("answer lost")
        return result

    def deliver_late(self, index: int) -> None:
        if self.late:
            self.late.pop(index % len(self.late))()


class SimBackend:
    """One host's ``membership.Backend`` on the hub (as ``HubPartitions`` does it)."""

    def __init__(self, hub: Hub, host: SimHost) -> None:
        self.hub, self.host = hub, host
        self.leases: dict[int, tuple[str, int, float]] = {}  # unit -> (lease id, epoch, until)
        self._listed_leases: dict[int, str] = {}
        self.store_time = StoreTime()  # the hub's clock as this host last read it

    def store_now(self) -> float | None:
        return self.store_time.now(self.host.clock())

    @property
    def units(self) -> list[int]:
        return self.hub.units

    def held(self) -> set[int]:
        return set(self.leases)

    async def beat(self, me: Member, ttl: float) -> None:
        hub, name, expires = self.hub, me.id, self.host.wall() + ttl
        sent = self.host.clock()

        def write() -> float:
            hub.beats[name] = (hub.new_id(), hub.now, ttl, expires)
            hub.ghost.beats_landed.setdefault(name, []).append((hub.now, hub.new_id()))
            return hub.now  # the Last-Modified of the answer (whole seconds)

        stamped = hub.send(self.host, write)
        self.store_time.read(stamped, sent, self.host.clock())

    async def forget(self, me: Member) -> None:
        self.hub.send(self.host, lambda: self.hub.beats.pop(me.id, None))

    async def members(self) -> list[Member]:
        hub = self.hub
        listed = hub.send(self.host, lambda: dict(hub.beats))
        live = fresh({h: (b[1], b[2]) for h, b in listed.items()}, self.store_now())
        return [Member(h, beat=str(b[0])) for h, b in listed.items() if h in live]

    async def holdings(self) -> dict[int, str | None]:
        hub = self.hub

        def listing() -> dict[int, tuple[bool, dict[str, str]]]:
            return {u: (b.leased(hub.now), dict(b.meta)) for u, b in hub.blobs.items()}

        found: dict[int, str | None] = dict.fromkeys(hub.units)
        self._listed_leases = {}
        for unit, (leased, meta) in hub.send(self.host, listing).items():
            if leased:
                found[unit] = meta.get("owner") or "?"
                self._listed_leases[unit] = meta.get("lease", "")
        return found

    async def acquire(self, unit: int, holder: str | None) -> bool:
        if unit in self.leases:
            return True
        hub, blob = self.hub, self.hub.blobs[unit]
        lease_id = f"{self.host.name}/{hub.new_id()}"
        sent = self.host.clock()

        def take() -> bool:
            if blob.leased(hub.now):
                return False
            blob.lease_id, blob.expires = lease_id, hub.now + LEASE
            return True

        try:
            if not hub.send(self.host, take):
                return False
        except Transient:
            return False  # as a 409 or a transient error: not taken (an orphan lease lapses)
        try:
            epoch = int(hub.send(self.host, lambda: blob.meta.get("epoch", "0"))) + 1
            if not hub.send(self.host, lambda: self._stamp(blob, unit, lease_id, epoch)):
                raise Transient("412: the lease is gone")  # set_blob_metadata(lease=...) refused
        except Transient:
            try:
                hub.send(self.host, lambda: self._free(blob, lease_id))
            except Transient:
                pass
            raise
        self.leases[unit] = (lease_id, epoch, sent + LEASE - MARGIN)
        return True

    def _stamp(self, blob: Blob, unit: int, lease_id: str, epoch: int) -> bool:
        hub = self.hub
        if blob.lease_id != lease_id or not blob.leased(hub.now):
            return False  # the write is conditional on the lease
        owner = hub.ghost.epoch_owner.setdefault((unit, epoch), self.host.name)
        if owner != self.host.name:
            hub.ghost.violations.append(f"epoch {epoch} of {unit} given to {owner} and {self}")
        blob.meta = {"epoch": str(epoch), "owner": self.host.name, "lease": lease_id}
        return True

    def _free(self, blob: Blob, lease_id: str) -> bool:
        if blob.lease_id != lease_id:
            return False
        blob.lease_id, blob.expires = None, 0.0
        return True

    async def evict(self, unit: int, holder: str) -> bool:
        lease_id = self._listed_leases.get(unit)
        if not lease_id or holder == self.host.name:
            return False
        blob = self.hub.blobs[unit]
        try:
            return bool(self.hub.send(self.host, lambda: self._free(blob, lease_id)))
        except Transient:
            return False

    async def renew_all(self) -> None:
        for unit in list(self.leases):
            lease_id, epoch, until = self.leases[unit]
            sent = self.host.clock()
            if until - sent > LEASE - MARGIN - 1.0:
                continue
            blob, hub = self.hub.blobs[unit], self.hub

            def renew(blob: Blob = blob, lease_id: str = lease_id, hub: Hub = hub) -> bool:
                if blob.lease_id != lease_id:
                    return False  # another holder since (a lapsed lease renews if nobody took it)
                blob.expires = hub.now + LEASE
                return True

            try:
                renewed = hub.send(self.host, renew)
            except Transient:
                continue
            if renewed:
                self.leases[unit] = (lease_id, epoch, sent + LEASE - MARGIN)
            else:
                self.leases.pop(unit, None)  # lost: this host stops writing to it

    async def release(self, unit: int) -> None:
        held = self.leases.pop(unit, None)
        if held is None:
            return
        blob = self.hub.blobs[unit]
        try:
            self.hub.send(self.host, lambda: self._free(blob, held[0]))
        except Transient:
            pass  # the lease lapses

    def wanted(self) -> dict[int, str]:
        return {}

    def held_for(self) -> dict[int, float]:
        return {}

    async def hand_over(self, unit: int, version: str) -> None:
        return None

    def owns(self, unit: int) -> int | None:
        """The epoch this host may write with now (the fence before every owner write)."""
        held = self.leases.get(unit)
        if held is None or self.host.clock() >= held[2]:
            return None
        return held[1]


class Observed(membership.Membership):
    """``Membership`` that keeps each judgment with the time it was made (for the model)."""

    judgments: list[tuple[float, int, frozenset[str]]]  # (time, sequence, judged dead)

    async def _listing(self) -> list[Member]:
        members = await super()._listing()
        sequence = self.backend.hub.new_id()  # type: ignore[attr-defined]
        self.judgments.append((membership.time.monotonic(), sequence, frozenset(self.dead)))
        return members


class SimHost:
    """One host: its membership, its open episodes, its running activities."""

    def __init__(self, hub: Hub, name: str, skew: float = 0.0) -> None:
        self.hub, self.name, self.skew = hub, name, skew
        self.backend = SimBackend(hub, self)
        self.membership = Observed(self.backend, Member(name), INTERVAL, silence=SILENCE)
        self.membership.judgments = []
        self.faults: list[str] = []
        self.phase = 0  # the second (modulo the interval) of this host's balancing rounds
        self.cut = self.stalled = self.crashed = False
        self.reads: dict[str, tuple[int, int, int, frozenset[int]]] = {}
        self.running: set[int] = set()

    def __repr__(self) -> str:
        return self.name

    def clock(self) -> float:
        return self.hub.now  # monotonic: goes on while the process is stopped

    def wall(self) -> float:
        """This host's wall clock: written into ``expires`` only (no decision reads it)."""
        return self.hub.now + self.skew

    def next_fault(self) -> str:
        return self.faults.pop(0) if self.faults else "ok"

    def acts(self) -> bool:
        return not (self.stalled or self.crashed)

    def run(self, step: Any) -> None:
        """Run one coroutine of the membership on this host's clock; a request without an
        answer ends it, as a failed round or heartbeat does."""
        real = membership.time.monotonic
        membership.time.monotonic = self.clock  # type: ignore[assignment]
        try:
            asyncio.run(step)
        except Transient:
            pass
        finally:
            membership.time.monotonic = real  # type: ignore[assignment]

    # --- an episode: read the head, then commit conditionally on its ETag ----------------

    def read(self, instance: str) -> None:
        unit = self.hub.unit_of(instance)
        epoch = self.backend.owns(unit)
        if epoch is None:
            return
        hub = self.hub

        def read() -> tuple[int, int, int, frozenset[int]]:
            head = hub.heads[instance]
            return head.seq, head.etag, head.epoch, frozenset(hub.inbox[instance])

        try:
            seq, etag, head_epoch, inbox = hub.send(self, read)
        except Transient:
            return
        if head_epoch > epoch:
            self.backend.leases.pop(unit, None)  # another host took the partition over since
            return
        self.reads[instance] = (seq, etag, epoch, inbox)

    def commit(self, instance: str, schedule: bool) -> None:
        opened = self.reads.pop(instance, None)
        unit = self.hub.unit_of(instance)
        epoch = self.backend.owns(unit)
        if opened is None or epoch is None or epoch != opened[2]:
            return
        seq, etag, _, taken = opened
        hub, name = self.hub, self.name

        def commit() -> bool | int:
            head = hub.heads[instance]
            if head.etag != etag:
                return False
            if hub.ghost.epoch_owner.get((unit, epoch)) != name:
                hub.ghost.violations.append(f"{name} committed {instance} with epoch {epoch}")
            if head.epoch > epoch:
                hub.ghost.violations.append(f"{name} wrote epoch {epoch} over {head.epoch}")
            hub.heads[instance] = Head(seq + 1, hub.new_id(), epoch)
            hub.inbox[instance] -= taken
            for message in taken:
                hub.ghost.consumed[message] = hub.ghost.consumed.get(message, 0) + 1
            hub.ghost.commits.setdefault(instance, []).append((name, epoch, seq + 1, taken))
            if schedule:
                work_id = hub.new_id()
                hub.works[work_id] = Work(instance, name)
                return work_id
            return True

        try:
            landed = hub.send(self, commit)
        except Transient:
            return  # a work item it made after all is found and claimed later (``poll``)
        if landed is not True and landed:
            self.running.add(landed)  # handed to this host's engine at once, no claim

    # --- activity work: claim, run, complete ----------------------------------------------

    def claim(self, work_id: int) -> None:
        hub, silence = self.hub, self.membership.silence
        live = {m.id for m in self.membership.last_members}
        now = self.backend.store_now()  # the hub's clock as read at the last heartbeat

        def claim() -> bool:
            work = hub.works.get(work_id)
            if work is None:
                return False
            claimer = work.claimer or (work.creator if work.count > 0 else "")
            if claimer and claimer != self.name:
                # A claim written (not a creator's own item): its age on the hub's clock.
                recent = bool(work.claimer) and (now is None or now - work.claimed_at < CLAIM_GRACE)
                if (recent and not silence.is_dead(claimer)) or claimer in live:
                    return False
            work.claimer, work.claimed_at, work.count = self.name, hub.now, work.count + 1
            return True

        try:
            if hub.send(self, claim):
                self.running.add(work_id)
        except Transient:
            pass

    def complete(self, work_id: int) -> None:
        if work_id not in self.running:
            return
        hub = self.hub

        def complete() -> bool:
            work = hub.works.pop(work_id, None)
            if work is None:
                return False  # completed by another run: this result is dropped
            hub.ghost.completions.setdefault(work_id, []).append(self.name)
            hub.inbox[work.instance].add(hub.new_id())
            return True

        try:
            hub.send(self, complete)
            self.running.discard(work_id)
        except Transient:
            pass
