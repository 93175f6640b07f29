"""Heartbeats and activity claims judged on the store's clock, not on a host's wall clock
(``ownership.StoreTime``, ``ownership.fresh``, ``store/azure/work.WorkItems``): a host whose
wall clock is an hour off is a member like any other, and its claims count as long as they
should - no shorter, no longer."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

from durable_host.cluster.ownership import StoreTime, fresh
from durable_host.store.azure.work import CLAIM_GRACE, WorkItems

HOUR = 3600.0


def test_a_reading_is_carried_forward_on_the_monotonic_clock() -> None:
    clock = StoreTime()
    assert clock.now(10.0) is None  # never read
    # Stamped 1000 (whole seconds) by a write sent at 10.0 and answered at 10.2.
    clock.read(1000.0, 10.0, 10.2)
    assert clock.now(10.1) == 1000.5  # halfway through the second, halfway through the trip
    assert clock.now(40.1) == 1030.5


def test_heartbeats_expire_by_their_stamp_and_ttl_on_the_stores_clock() -> None:
    beats = {"a": (1000.0, 20.0), "b": (985.0, 20.0), "c": (979.0, 20.0)}
    assert fresh(beats, 1000.0) == {"a", "b"}
    assert fresh({}, 1000.0) == set()


def test_without_a_reading_the_newest_stamp_stands_for_the_stores_time() -> None:
    # A lower bound of the store's time: nobody live is dropped.
    beats = {"a": (1000.0, 20.0), "b": (981.0, 20.0), "c": (979.0, 20.0)}
    assert fresh(beats, None) == {"a", "b"}


class Row(dict[str, Any]):
    """A work item as the Tables SDK returns it: properties, and ``metadata`` with the
    ``timestamp`` the service wrote."""

    def __init__(self, stamped: float | None, **properties: Any) -> None:
        super().__init__(properties)
        at = None if stamped is None else datetime.fromtimestamp(stamped, UTC)
        self.metadata = {"timestamp": at}


def work_items(
    store_now: float | None,
    live: frozenset[str] = frozenset(),
    dead: frozenset[str] = frozenset(),
) -> WorkItems:
    work = WorkItems(SimpleNamespace(writer="me"), None, None)  # type: ignore[arg-type]
    work.store_now = lambda: store_now
    work.is_live = lambda host: host in live
    work.is_dead = lambda host: host in dead
    return work


def test_a_claim_of_a_host_an_hour_behind_counts_for_the_grace() -> None:
    now = 1_000_000.0
    work = work_items(now)
    # Its claim stamp (CT, its wall clock) is an hour old; the service stamped it a second ago.
    row = Row(now - 1.0, C="x", CT=time.time() - HOUR, DequeueCount=2)
    assert work.claimed_elsewhere(row)
    assert not work_items(now, dead=frozenset({"x"})).claimed_elsewhere(
        row
    )  # seen to stop: not its


def test_a_claim_of_a_host_an_hour_ahead_holds_until_its_claimer_is_seen_to_stop() -> None:
    now = 1_000_000.0
    row = Row(now - CLAIM_GRACE - 1.0, C="x", CT=time.time() + HOUR, DequeueCount=2)
    # The wall-clock half only keeps a claim longer: a claimer never seen beating holds it.
    assert work_items(now).claimed_elsewhere(row)
    assert not work_items(now, dead=frozenset({"x"})).claimed_elsewhere(row)
    assert work_items(now, live=frozenset({"x"})).claimed_elsewhere(row)


def test_a_claim_lapses_when_both_clocks_say_its_grace_passed() -> None:
    now = 1_000_000.0
    row = Row(now - CLAIM_GRACE - 1.0, C="x", CT=time.time() - CLAIM_GRACE - 1.0, DequeueCount=2)
    assert not work_items(now).claimed_elsewhere(row)  # its claimer is no live member
    assert work_items(now, live=frozenset({"x"})).claimed_elsewhere(row)  # a live one's holds


def test_a_claim_just_made_counts_whatever_the_reading_of_the_service_clock_says() -> None:
    # A reading far ahead of the row's stamp must never let a claim of a moment ago go.
    row = Row(1_000_000.0, C="x", CT=time.time(), DequeueCount=1)
    assert work_items(1_000_000.0 + 3600.0).claimed_elsewhere(row)


def test_without_a_reading_of_the_stores_clock_every_claim_counts() -> None:
    row = Row(0.0, C="x", CT=1.0, DequeueCount=2)
    assert work_items(None).claimed_elsewhere(row)


def test_a_creators_own_work_item_counts_only_while_its_creator_is_live() -> None:
    row = Row(1_000_000.0, W="x", DequeueCount=1)  # no claim written: no grace
    assert not work_items(1_000_000.0).claimed_elsewhere(row)
    assert work_items(1_000_000.0, live=frozenset({"x"})).claimed_elsewhere(row)
