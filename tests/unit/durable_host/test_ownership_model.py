"""The ownership protocol checked by a model: Hypothesis drives several hosts running the
real ``membership.Membership`` (``ownership.plan``, ``shares``, ``Silence``) over a simulated
hub and network (``ownership_sim.py``), whose requests are lost, answered never, or held and
applied later in another order; hosts are stopped and resumed, crash, are cut off from the
hub and healed, while time passes in steps. Episodes commit fenced by the partition epoch and
the head's ETag; activity work is claimed, run and completed as on the Azure store.

Invariants after every step (``docs/ownership-model.md``):
* one writer per partition epoch: an epoch is stamped for one host, and every commit made
  with it comes from that host; a head never goes back to an older epoch;
* no committed episode lost: each instance's commits form one chain (sequence 1, 2, 3 ...
  with no two on one base) and every message is consumed by at most one commit;
* no activity whose effects both land from two hosts: a work item is completed once;
* a member judged dead by its silent heartbeat wrote no heartbeat for the silence;
and at the end, with the network healed and the hosts left running: every partition is
held by exactly one live host that knows it, in fair shares.

Bounded: ``DURABLE_MODEL_EXAMPLES`` examples (default 30: a few seconds of CPU), up to
``DURABLE_MODEL_STEPS`` steps each (default 40). Wall clocks: most hosts a few seconds
apart, and in every run with two hosts or more from the start, one whose wall clock is
``DURABLE_MODEL_SKEW`` seconds off (default 3600, ahead or behind; joining hosts may be too).
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from tests.unit.durable_host.ownership_sim import INTERVAL, LEASE, SILENCE, Hub, SimHost

SKEW = float(os.environ.get("DURABLE_MODEL_SKEW") or 3600)


EXAMPLES = int(os.environ.get("DURABLE_MODEL_EXAMPLES") or 30)
STEPS = int(os.environ.get("DURABLE_MODEL_STEPS") or 40)
FAULT = st.sampled_from(["ok", "ok", "ok", "ok", "lost", "noreply", "late"])
FAULTS = st.lists(FAULT, max_size=6)
# Wall clocks a few seconds apart (NTP), or a host's an hour off (stepped by hand, a VM
# restored from a snapshot): no decision between hosts may depend on them.
SKEWS = st.sampled_from([0.0, 0.0, 2.0, -2.0, SKEW, -SKEW])
OFF = st.sampled_from([SKEW, -SKEW])


class OwnershipModel(RuleBasedStateMachine):
    @initialize(
        partitions=st.integers(1, 4),
        hosts=st.integers(1, 3),
        skews=st.lists(SKEWS, min_size=3, max_size=3),
        off=OFF,
    )
    def start(self, partitions: int, hosts: int, skews: list[float], off: float) -> None:
        skews[1] = off  # with two hosts or more, one is an hour off
        self.hub = Hub(partitions, instances=partitions * 2)
        self.hosts = [SimHost(self.hub, f"h{n}", skews[n]) for n in range(hosts)]
        for n, host in enumerate(self.hosts):
            host.phase = n % int(INTERVAL)  # the hosts' rounds are not in step
        self.joined = len(self.hosts)
        self.judged: set[str] = set()
        self.taken_over = False
        for host in self.hosts:
            host.run(host.membership.round())

    # --- hosts -----------------------------------------------------------------------

    def pick(self, n: int) -> SimHost:
        return self.hosts[n % len(self.hosts)]

    @rule(seconds=st.integers(1, 12), faults=st.lists(FAULT, max_size=40))
    def time_passes(self, seconds: int, faults: list[str]) -> None:
        """The hosts live on their own schedule: every second a heartbeat and a listing,
        every ``INTERVAL`` seconds a balancing round; the network does ``faults`` to their
        requests (dealt round-robin)."""
        acting = [h for h in self.hosts if h.acts()]
        for k, host in enumerate(acting):
            host.faults = faults[k :: max(1, len(acting))]
        for _ in range(seconds):
            self.hub.now += 1.0
            self.tick(acting)

    def tick(self, hosts: list[SimHost]) -> None:
        for host in hosts:
            host.run(self._beat(host))
            if int(self.hub.now) % int(INTERVAL) == host.phase:
                host.run(host.backend.renew_all())
                host.run(host.membership.round())

    @staticmethod
    async def _beat(host: SimHost) -> None:
        await host.backend.beat(host.membership.me, ttl=host.membership.ttl)
        await host.membership._listing()  # the heartbeat loop's listing (Silence.observe)
        if host.membership.dead & set(host.membership.last_holdings.values()):
            await host.membership.round()  # a round at once when a holder fell silent

    @rule(n=st.integers(0, 5))
    def stop_or_continue(self, n: int) -> None:  # SIGSTOP / SIGCONT
        host = self.pick(n)
        host.stalled = not host.stalled

    @rule(n=st.integers(0, 5))
    def cut_or_heal(self, n: int) -> None:  # the host's link to the store
        host = self.pick(n)
        host.cut = not host.cut

    @precondition(lambda self: sum(not h.crashed for h in self.hosts) > 1)
    @rule(n=st.integers(0, 5))
    def crash(self, n: int) -> None:  # SIGKILL: the process and its memory are gone
        self.pick(n).crashed = True

    @precondition(lambda self: len(self.hosts) < 5)
    @rule(skew=SKEWS)
    def join(self, skew: float) -> None:
        host = SimHost(self.hub, f"h{self.joined}", skew)
        host.phase = self.joined % int(INTERVAL)
        self.joined += 1
        self.hosts.append(host)
        host.run(host.membership.round())

    @rule(index=st.integers(0, 20))
    def late_request_arrives(self, index: int) -> None:
        self.hub.deliver_late(index)

    # --- work --------------------------------------------------------------------------

    @rule(instance=st.integers(0, 7))
    def message(self, instance: int) -> None:  # a start, an event, a result: anyone writes it
        name = self.hub.instances[instance % len(self.hub.instances)]
        self.hub.inbox[name].add(self.hub.new_id())

    @rule(
        n=st.integers(0, 5),
        instance=st.integers(0, 7),
        schedule=st.booleans(),
        at_once=st.booleans(),
        faults=FAULTS,
    )
    def episode(self, n: int, instance: int, schedule: bool, at_once: bool, faults: list[str]):
        """An owner reads an instance's head and inbox and commits its episode - at once,
        or later (``open_episode_commits``), after whatever happens in between."""
        name = self.hub.instances[instance % len(self.hub.instances)]
        unit = self.hub.unit_of(name)
        # Mostly a host that believes it owns the partition (rightly or not any more).
        owners = [h for h in self.hosts if h.acts() and h.backend.owns(unit) is not None]
        host = owners[n % len(owners)] if owners and n < 4 else self.pick(n)
        if host.acts():
            host.faults = faults
            host.read(name)
            if at_once and name in host.reads:
                host.commit(name, schedule)

    @rule(n=st.integers(0, 5), pick=st.integers(0, 7), schedule=st.booleans(), faults=FAULTS)
    def open_episode_commits(self, n: int, pick: int, schedule: bool, faults: list[str]) -> None:
        host = self.pick(n)
        if host.acts() and host.reads:
            host.faults = faults
            host.commit(sorted(host.reads)[pick % len(host.reads)], schedule)

    @rule(n=st.integers(0, 5), pick=st.integers(0, 50), at_once=st.booleans(), faults=FAULTS)
    def activity_claimed(self, n: int, pick: int, at_once: bool, faults: list[str]) -> None:
        """A host claims a work item (its own, a released one, or one whose claimer it may
        take it from) and runs it; it completes at once, or later (``activity_completes``)."""
        if not self.hub.works:
            return
        work_id = sorted(self.hub.works)[pick % len(self.hub.works)]
        work = self.hub.works[work_id]
        # Half the time the host that made or claimed it (the usual run), else any host.
        mine = [h for h in self.hosts if h.name == (work.claimer or work.creator)]
        host = mine[0] if mine and n % 2 == 0 else self.pick(n // 2)
        if not host.acts():
            return
        before = {h.name for h in self.hosts if work_id in h.running and not h.crashed}
        host.faults = faults
        host.claim(work_id)
        if work_id not in host.running:
            return
        for other in before - {host.name}:
            self.taken_over = True
            self.check_silent(other, f"{host} claimed work {work_id} while {other} ran it")
        if at_once:
            host.complete(work_id)

    @rule(n=st.integers(0, 5), faults=FAULTS)
    def activity_completes(self, n: int, faults: list[str]) -> None:
        host = self.pick(n)
        if host.acts() and host.running:
            host.faults = faults
            host.complete(min(host.running))

    # --- invariants --------------------------------------------------------------------

    def check_silent(self, name: str, what: str, at: tuple[float, int] | None = None) -> None:
        """``name`` wrote no heartbeat in the ``SILENCE`` seconds before ``at`` (a time and
        the hub's sequence number, which orders what happens in one instant; default now)."""
        now, sequence = at or (self.hub.now, self.hub.new_id())
        landed = self.hub.ghost.beats_landed.get(name, [])
        recent = [t for t, seq in landed if t > now - SILENCE and seq < sequence]
        assert not recent, f"{what}, but its heartbeat landed at {recent} (now {now})"

    @invariant()
    def no_violation_seen_by_the_hub(self) -> None:
        assert not self.hub.ghost.violations, self.hub.ghost.violations

    @invariant()
    def one_chain_per_instance(self) -> None:
        for instance, commits in self.hub.ghost.commits.items():
            assert [c[2] for c in commits] == list(range(1, len(commits) + 1)), instance
            epochs = [c[1] for c in commits]
            assert epochs == sorted(epochs), (instance, epochs)
            assert self.hub.heads[instance].seq == len(commits)
        assert all(times == 1 for times in self.hub.ghost.consumed.values())

    @invariant()
    def one_completion_per_work_item(self) -> None:
        assert all(len(c) == 1 for c in self.hub.ghost.completions.values())

    @invariant()
    def the_dead_were_silent(self) -> None:
        for host in self.hosts:
            judgments, host.membership.judgments = host.membership.judgments, []
            for at, sequence, dead in judgments:
                for name in dead:
                    self.judged.add(name)
                    self.check_silent(name, f"{host} judged {name} dead at {at}", (at, sequence))

    def teardown(self) -> None:
        if not hasattr(self, "hub"):
            return
        hub = self.hub
        for host in self.hosts:
            host.cut = host.stalled = False
            host.faults = []
        ghost = hub.ghost
        event(f"commits: {min(sum(map(len, ghost.commits.values())), 5)}+")
        event(f"work items completed: {min(len(ghost.completions), 3)}+")
        event(f"epochs stamped: {min(len(ghost.epoch_owner), 6)}+")
        event(f"hosts ever judged dead: {bool(self.judged)}")
        event(f"work taken from a claimer that ran it: {self.taken_over}")
        event(f"a host an hour off: {any(abs(h.skew) >= SKEW for h in self.hosts)}")
        hub.late.clear()  # what the network still holds is lost with the partition
        live = [h for h in self.hosts if not h.crashed]
        # Enough for a lost lease to lapse, a silent member to be judged and evicted, and
        # every host to reach its share (two rounds each side).
        for _ in range(int(LEASE + SILENCE + 6 * INTERVAL)):
            hub.now += 1.0
            self.tick(live)
        for unit, blob in hub.blobs.items():
            holders = [h for h in live if unit in h.backend.held()]
            assert blob.leased(hub.now), f"partition {unit} is held by nobody"
            owner = blob.meta.get("owner")
            assert [h.name for h in holders] == [owner], (unit, owner, holders)
        counts = [len(h.backend.held()) for h in live]
        assert max(counts) - min(counts) <= 1, dict(zip(live, counts, strict=True))


OwnershipModel.TestCase.settings = settings(
    max_examples=EXAMPLES,
    stateful_step_count=STEPS,
    deadline=None,
    database=None,  # nothing written into the checkout
    suppress_health_check=[HealthCheck.too_slow],
)
TestOwnershipModel = OwnershipModel.TestCase
# A long run is long: about 0.3 s of CPU an example on this machine's 2 cores.
TestOwnershipModel.pytestmark = [pytest.mark.timeout(max(120, EXAMPLES))]  # type: ignore[attr-defined]
