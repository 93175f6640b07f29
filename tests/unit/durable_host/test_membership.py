"""The balancing loop's rounds against an in-memory backend: what it takes, releases, leaves."""

from __future__ import annotations

import asyncio

from durable_host.membership import Membership
from durable_host.ownership import Member


class Hub:
    """Leases and heartbeats of one hub, in memory (the service's view)."""

    def __init__(self, count: int = 4) -> None:
        self.holder: dict[int, str | None] = dict.fromkeys(range(count))
        self.beats: dict[str, Member] = {}


class FakeBackend:
    def __init__(self, hub: Hub, me: str) -> None:
        self.hub, self.me = hub, me
        self.units = list(hub.holder)

    def held(self) -> set[int]:
        return {u for u, h in self.hub.holder.items() if h == self.me}

    async def beat(self, me: Member, ttl: float) -> None:
        self.hub.beats[me.id] = me

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
        return True

    async def renew_all(self) -> None:
        pass

    async def release(self, unit: int) -> None:
        if self.hub.holder[unit] == self.me:
            self.hub.holder[unit] = None


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
