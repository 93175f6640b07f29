"""The whole hub's waiting work and its hosts, for the scale signal (``durable_host/cluster/scale.py``)
and ``next-wake``: per partition the visible messages, the activity work items nobody
live claims, and the live hosts with the partitions each holds.

``oldest`` is None throughout: the ids of this store are sequence numbers, not times (the
scale signal derives an age from an Azure Storage id), and the recommendation does not
need it.
"""

from __future__ import annotations

from typing import Any

from durable_host.cluster.ownership import partition_of
from durable_host.store.postgres.database import Conn, Database
from durable_host.store.postgres.partitions import HubPartitions


async def hub_backlog(
    db: Database, partitions: HubPartitions | None, count: int, now: str, claimable: str
) -> dict[str, Any]:
    async def read(conn: Conn) -> tuple[list[tuple[str, int]], int]:
        cur = await db.execute(
            conn,
            "SELECT instance_id, count(*) FROM inbox"
            " WHERE visible_at IS NULL OR visible_at <= %s GROUP BY instance_id",
            (now,),
        )
        visible = [(str(r[0]), int(r[1])) for r in await cur.fetchall()]
        cur = await db.execute(
            conn, f"SELECT count(*) FROM activities WHERE {claimable}", {"me": None}
        )
        row = await cur.fetchone()
        return visible, int(row[0]) if row else 0

    visible, work = await db.read(read)
    per = dict.fromkeys(range(count), 0)
    for instance_id, n in visible:
        per[partition_of(instance_id, count)] += n
    hosts: list[dict[str, Any]] = []
    holdings: dict[int, str | None] = {}
    if partitions is not None:
        holdings = await partitions.holdings()
        for member in await partitions.members():
            held = sorted(u for u, holder in holdings.items() if holder == member.id)
            hosts.append(
                {
                    "id": member.id,
                    "version": member.version,
                    "draining": member.draining,
                    "partitions": held,
                    "self": member.id == partitions.owner,
                }
            )
    return {
        "partitions": [
            {"partition": u, "owner": holdings.get(u), "backlog": n, "oldest": None}
            for u, n in sorted(per.items())
        ],
        "activities": {"backlog": work, "oldest": None},
        "hosts": hosts,
    }
