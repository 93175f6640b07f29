"""Versions side by side on one PostgreSQL hub: what the store tells ``Membership`` and
the activity sweep, the same rule as on the Azure store (``docs/versioning.md``).

A partition holds instances of every version; its owner runs those its version policy
allows and parks the others (``versioning.Parking``, the engine's). ``parked`` names, per
partition this host holds, the versions of the instances it left untouched there lately;
``Membership`` hands such a partition to a live host of that version (``ownership.handovers``:
one a round, or this host's whole surplus over its fair share at once), and the backend
(``partitions.HubPartitions.hand_over``) marks it for that version as it releases it.
``drop_lost`` forgets the parked instances of partitions no longer held: their new owner
decides for them. ``leaves`` keeps an activity this app does not define (one only another
version has) for a host of that version while any other host is live.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from durable_host.cluster.ownership import partition_of
from durable_host.core.records import ActivityWork
from durable_host.core.versioning import Parking


class SideBySide:
    """The engine's parked instances and the app's activities, for one store."""

    def __init__(self, partition_count: int, lease_seconds: float) -> None:
        self.partition_count = partition_count
        self.lease_seconds = lease_seconds
        self.parking: Parking | None = None  # set before the store opens (``serve``)
        self.activities: set[str] | None = None  # lower case; None: every activity is ours
        self.others_live: Callable[[], bool] = lambda: False  # set when the store joins

    def serve(self, parking: Parking, activities: set[str]) -> None:
        self.parking = parking
        self.activities = {name.lower() for name in activities}

    def parked(self, held: set[int]) -> dict[int, list[str]]:
        """Per held partition, the versions of the instances left untouched there lately
        (within a re-check and a lease: older entries may have finished elsewhere)."""
        if self.parking is None:
            return {}
        window = Parking.RECHECK_SECONDS + self.lease_seconds
        found: dict[int, list[str]] = {}
        for instance_id, version in self.parking.recent(time.monotonic(), window).items():
            unit = partition_of(instance_id, self.partition_count)
            if unit in held:
                found.setdefault(unit, []).append(version)
        return found

    def drop_lost(self, held: set[int]) -> None:
        """Forget the parked instances of partitions given up: another host decides."""
        if self.parking is None:
            return
        for instance_id in self.parking.ids():
            if partition_of(instance_id, self.partition_count) not in held:
                self.parking.release(instance_id)

    def leaves(self, name: str) -> bool:
        """Is activity ``name`` left to another host (this app does not define it and
        another host is live)?"""
        if self.activities is None or name.lower() in self.activities:
            return False
        return self.others_live()

    def ours(self, works: list[ActivityWork]) -> list[ActivityWork]:
        """The work items this host's app can run."""
        return [w for w in works if not self.leaves(w.name)]
