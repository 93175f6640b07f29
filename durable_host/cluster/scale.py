"""The scale signal: how much work waits in a task hub and how many hosts it wants.

``recommend`` is pure. It follows the reasoning of the Functions scale controller for the
Durable Task Azure Storage provider: orchestration and entity work is spread over
``partitionCount`` partitions, each run by one host, so more hosts than partitions with
work waiting cannot help it; activity work is anyone's, so it can use as many hosts as
it keeps busy (``max_activities`` slots each). No work waiting, nothing running: 0 hosts
(scale to zero; ``next-wake`` says when to start one again).

``collect`` asks the store, ``view`` assembles the answer of ``GET /admin/host/scale`` from what the store reports
(``hub_backlog``: per partition the visible messages and the oldest one's age, the
activity work items and the oldest one's age, the live hosts and who holds what). A store
without it (SQLite: one host per file) answers from ``ready_instances`` alone: one
partition, held by this host, activity backlog unknown.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from durable_host.core import history as h


def recommend(
    partition_count: int,
    partition_backlog: Mapping[int, int],
    activity_backlog: int,
    max_activities: int,
    running: int = 0,
) -> tuple[int, str]:
    """(hosts, why): ``partition_backlog`` = visible messages per partition, ``running`` =
    episodes and activities in progress on the hosts now (keeps at least one host)."""
    busy = sum(1 for n in partition_backlog.values() if n > 0)
    orchestration_hosts = min(partition_count, busy)
    activity_hosts = math.ceil(activity_backlog / max(1, max_activities))
    hosts = max(orchestration_hosts, activity_hosts)
    if hosts == 0 and running:
        return 1, "nothing waits, but work is running"
    if hosts == 0:
        return 0, "nothing waits and nothing runs: scale to zero"
    why = (
        f"{busy} of {partition_count} partitions have messages waiting (at most one host each);"
        f" {activity_backlog} activity work items waiting ({max(1, max_activities)} per host)"
    )
    return hosts, why


def _aged(entry: Mapping[str, Any], now: datetime) -> dict[str, Any]:
    """``oldest`` (an id) replaced by ``oldestAgeSeconds``."""
    out = {k: v for k, v in entry.items() if k != "oldest"}
    oldest = entry.get("oldest")
    out["oldestAgeSeconds"] = None if oldest is None else round(age_seconds(oldest, now), 3)
    return out


async def collect(store: Any, partition_count: int, now: datetime) -> dict[str, Any]:
    """What the store reports of the hub's waiting work (the one IO step here)."""
    backlog = getattr(store, "hub_backlog", None)
    if backlog is not None:
        return dict(await backlog(h.format_time(now)))
    ready = await store.ready_instances(h.format_time(now))
    return {
        "partitions": [
            {"partition": 0, "owner": "this host", "backlog": len(ready), "oldest": None}
        ],
        "activities": {"backlog": None, "oldest": None},
        "hosts": [{"id": "this host", "partitions": [0], "self": True}],
    }


def age_seconds(item_id: int, now: datetime) -> float:
    """Age of a message or work item from its id (microseconds * 1000 + a random part)."""
    return max(0.0, now.timestamp() - item_id / 1000 / 1_000_000)


def view(
    *,
    partition_count: int,
    backlog: Mapping[str, Any],
    max_activities: int,
    running: int,
    now: datetime,
) -> dict[str, Any]:
    """The JSON of ``/admin/host/scale`` (see the module docstring)."""
    partitions = [_aged(p, now) for p in backlog["partitions"]]
    per_partition = {int(p["partition"]): int(p["backlog"]) for p in partitions}
    activity = _aged(backlog["activities"], now)
    hosts, why = recommend(
        partition_count, per_partition, int(activity.get("backlog") or 0), max_activities, running
    )
    return {
        "time": h.format_time(now),
        "partitionCount": partition_count,
        "partitions": list(partitions),
        "activities": activity,
        "hosts": backlog["hosts"],
        "recommendedHosts": hosts,
        "reason": why,
    }


async def answer(engine: Any, now: datetime) -> dict[str, Any]:
    """``GET /admin/host/scale`` for the host whose engine is ``engine``."""
    store = engine.store
    count = int(getattr(store, "partition_count", 1))
    backlog = await collect(store, count, now)
    return view(
        partition_count=count,
        backlog=backlog,
        max_activities=engine.config.max_activities,
        running=int(engine.busy()),
        now=now,
    )


def owned(store: Any) -> dict[str, Any] | None:
    """The partitions this host holds, for ``/admin/host/status``; None for a store one
    host owns whole (SQLite: one host per file), whose status stays the state alone."""
    describe = getattr(store, "owned_partitions", None)
    if describe is None:
        return None
    info = dict(describe())
    return {"count": info["count"], "held": info["held"]}
