"""The balancing loop's rounds against an in-memory backend: what it takes, releases, leaves."""

from __future__ import annotations

import asyncio

from durable_host.cluster.membership import Membership
from durable_host.cluster.ownership import Member


class Hub:
    """Leases and heartbeats of one hub, in memory (the service's view)."""

    def __init__(self, count: int = 4) -> None:
        self.holder: dict[int, str | None] = dict.fromkeys(range(count))
        self.beats: dict[str, Member] = {}
        self.wanted: dict[int, str] = {}  # free unit -> the version it was handed over to
        self.count = 0  # heartbeats written, the beat token
        self.frozen = ""  # a member whose heartbeat stopped changing
        self.evicted: list[tuple[int, str]] = []


class FakeBackend:
    def __init__(self, hub: Hub, me: str) -> None:
        self.hub, self.me = hub, me
        self.units = list(hub.holder)
        self.clock = [0.0]  # seconds, moved by the test
        self.taken_at: dict[int, float] = {}

    def held(self) -> set[int]:
        return {u for u, h in self.hub.holder.items() if h == self.me}

    async def beat(self, me: Member, ttl: float) -> None:
        if self.hub.frozen != me.id:  # a frozen member's heartbeat no longer changes
            self.hub.count += 1
            self.hub.beats[me.id] = Member(
                me.id, me.version, me.draining, me.extra, str(self.hub.count)
            )

    async def forget(self, me: Member) -> None:
        self.hub.beats.pop(me.id, None)

    async def members(self) -> list[Member]:
        return list(self.hub.beats.values())

    async def holdings(self) -> dict[int, str | None]:
        return dict(self.hub.holder)

    async def acquire(self, unit: int, holder: str | None) -> bool:
        if self.hub.holder[unit] not in (None, self.me) and self.hub.holder[unit] in self.hub.beats:
            return False  # a live holder's lease has not lapsed
        self.hub.holder[unit] = self.me
        self.hub.wanted.pop(unit, None)  # an acquisition rewrites the mark
        self.taken_at[unit] = self.clock[0]
        return True

    async def evict(self, unit: int, holder: str) -> bool:
        if self.hub.holder[unit] != holder:
            return False
        self.hub.holder[unit] = None
        self.hub.evicted.append((unit, holder))
        return True

    async def renew_all(self) -> None:
        pass

    async def release(self, unit: int) -> None:
        if self.hub.holder[unit] == self.me:
            self.hub.holder[unit] = None

    def wanted(self) -> dict[int, str]:
        return {u: v for u, v in self.hub.wanted.items() if self.hub.holder[u] is None}

    def held_for(self) -> dict[int, float]:
        return {u: self.clock[0] - self.taken_at.get(u, 0.0) for u in self.held()}

    async def hand_over(self, unit: int, version: str) -> None:
        if self.hub.holder[unit] == self.me:
            self.hub.wanted[unit] = version
            await self.release(unit)


def test_rounds_balance_and_a_leave_hands_everything_over() -> None:
    async def body() -> None:
        hub = Hub()
        a = Membership(FakeBackend(hub, "a"), Member("a"), 60)
        b = Membership(FakeBackend(hub, "b"), Member("b"), 60)
        await a.join()
        assert a.backend.held() == {0, 1, 2, 3}
        await b.join()
        assert b.backend.held() == set()  # a live host holds them all
        await a.round()  # a releases above its share
        await b.round()  # b takes what a gave back
        assert len(a.backend.held()) == len(b.backend.held()) == 2
        await a.leave()
        assert "a" not in hub.beats and a.backend.held() == set()
        await b.round()
        assert b.backend.held() == {0, 1, 2, 3}
        await b.leave()

    asyncio.run(body())


def test_a_dead_members_units_are_taken_once_its_heartbeat_is_gone() -> None:
    async def body() -> None:
        hub = Hub()
        a = Membership(FakeBackend(hub, "a"), Member("a"), 60)
        b = Membership(FakeBackend(hub, "b"), Member("b"), 60)
        await a.join()
        await b.join()
        await a.round()
        await b.round()
        assert a._task is not None
        a._task.cancel()  # a dies: no more rounds, its heartbeat expires
        hub.beats.pop("a")
        await b.round()
        assert b.backend.held() == {0, 1, 2, 3}
        await b.leave()

    asyncio.run(body())


def test_a_members_units_are_evicted_when_its_heartbeat_stops_changing() -> None:
    async def body() -> None:
        hub = Hub()
        a = Membership(FakeBackend(hub, "a"), Member("a"), 60, silence=0.2)
        b = Membership(FakeBackend(hub, "b"), Member("b"), 60, silence=0.2)
        await a.join()
        await b.join()
        await a.round()
        await b.round()
        assert len(b.backend.held()) == 2 and not hub.evicted
        # a hangs: its heartbeat stays listed (not expired) but no longer changes. b's beat
        # loop (every silence / 3) sees it and runs a round at once, not after its interval.
        hub.frozen = "a"
        deadline = asyncio.get_running_loop().time() + 5
        while b.backend.held() != {0, 1, 2, 3}:
            assert asyncio.get_running_loop().time() < deadline, hub.holder
            await asyncio.sleep(0.05)
        assert sorted(hub.evicted) == [(0, "a"), (1, "a")]
        assert b.is_dead("a") and [m.id for m in b.last_members] == ["b"]
        # It beats again: alive, and it takes its share again at its next rounds.
        hub.frozen = ""
        await a.round()
        await b.round()
        assert not b.is_dead("a")
        for host in (a, b):
            await host.leave()

    asyncio.run(body())


STRICT = {"match": "Strict"}


def test_a_partition_with_work_of_another_version_goes_to_a_host_of_that_version() -> None:
    async def body() -> None:
        hub = Hub()
        parked: dict[int, list[str]] = {}
        v1 = Membership(FakeBackend(hub, "v1"), Member("v1", "1.0", extra=STRICT), 60)
        v2 = Membership(
            FakeBackend(hub, "v2"), Member("v2", "2.0", extra=STRICT), 60, parked=lambda: parked
        )
        await v1.join()
        await v2.join()
        await v1.round()
        await v2.round()
        assert v1.backend.held() == {0, 1} and v2.backend.held() == {2, 3}
        parked[3] = ["1.0"]  # v2 left a 1.0 instance of partition 3 untouched
        await v2.round()
        assert v2.backend.held() == {2, 3}  # held for less than the dwell: its own work first
        v2.backend.clock[0] = v1.backend.clock[0] = 1000.0
        await v2.round()
        assert v2.backend.held() == {2} and hub.wanted == {3: "1.0"}
        await v2.round()
        assert v2.backend.held() == {2}  # not taken back: it is a 1.0 host's
        await v1.round()
        assert v1.backend.held() == {0, 1, 3}  # beyond its share: handed over to its version
        await v1.round()  # above its share: gives back another unit, keeps the handed one
        assert v1.backend.held() == {0, 3}
        await v2.round()
        assert v2.backend.held() == {1, 2}
        await v1.leave()
        await v2.leave()

    asyncio.run(body())


def test_no_handover_when_no_live_host_runs_the_version() -> None:
    async def body() -> None:
        hub = Hub()
        v2 = Membership(
            FakeBackend(hub, "v2"),
            Member("v2", "2.0", extra=STRICT),
            60,
            parked=lambda: {0: ["1.0"]},
        )
        await v2.join()
        v2.backend.clock[0] = 1000.0
        await v2.round()
        assert v2.backend.held() == {0, 1, 2, 3} and hub.wanted == {}
        await v2.leave()

    asyncio.run(body())


def test_a_host_above_its_share_hands_its_whole_surplus_over_in_one_round() -> None:
    """v2 idled and handed v1 every partition; now v2 instances wait in all four: v1 gives
    back the two above its share at once (not one a round), and keeps its own share."""

    async def body() -> None:
        hub = Hub()
        parked: dict[int, list[str]] = {}
        v1 = Membership(
            FakeBackend(hub, "v1"), Member("v1", "1.0", extra=STRICT), 60, parked=lambda: parked
        )
        v2 = Membership(FakeBackend(hub, "v2"), Member("v2", "2.0", extra=STRICT), 60)
        await v1.join()
        await v2.join()
        assert v1.backend.held() == {0, 1, 2, 3} and v2.backend.held() == set()
        parked.update({unit: ["2.0"] for unit in range(4)})
        v1.backend.clock[0] = 1000.0  # every partition held past the dwell
        await v1.round()
        assert v1.backend.held() == {2, 3} and hub.wanted == {0: "2.0", 1: "2.0"}
        await v2.round()
        assert v2.backend.held() == {0, 1}
        await v1.leave()
        await v2.leave()

    asyncio.run(body())
