"""Versions side by side on one PostgreSQL hub, below the host: a partition where a host of
1.0 left an instance of 2.0 untouched is handed to the host of 2.0 (the Azure store's rule,
``docs/versioning.md``), and the handover mark is void once the partition was taken.
The rainbow test of two real hosts is ``tests/host/test_versions.py`` (with
``DURABLE_TEST_STORES`` naming postgres)."""

from __future__ import annotations

import asyncio
import time
import uuid

from durable_host.cluster.ownership import partition_of
from durable_host.core.versioning import MatchStrategy, Parking, Verdict, VersionPolicy
from durable_host.store.postgres import PostgresStore, from_spec

LEASE = 5  # rounds every LEASE / 3 seconds, a dwell of two rounds


def versioned(url: str, hub: str, version: str) -> tuple[PostgresStore, Parking]:
    env = {"DURABLE_HOST_LEASE_SECONDS": str(LEASE)}
    policy = VersionPolicy(version, MatchStrategy.STRICT)
    store = PostgresStore(
        from_spec(f"postgres:{url}", hub, env=env),
        partition_count=2,
        version=version,
        policy=policy,
    )
    parking = Parking()
    store.serve_versions(parking, {"act"})
    return store, parking


async def until(check, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)


def test_a_partition_with_a_parked_instance_is_handed_to_a_host_of_its_version(
    postgres_url: str,
) -> None:
    hub = "V" + uuid.uuid4().hex[:10]

    async def main() -> None:
        v1, parking = versioned(postgres_url, hub, "1.0")
        v2, _ = versioned(postgres_url, hub, "2.0")
        await v1.open()
        await v2.open()
        assert v1.partitions is not None and v2.partitions is not None
        p1, p2 = v1.partitions, v2.partitions
        try:
            await until(lambda: len(p1.held()) == len(p2.held()) == 1, 30, "one partition each")
            (unit,) = p1.held()
            instance = next(f"i{n}" for n in range(100) if partition_of(f"i{n}", 2) == unit)
            # The 1.0 host's engine left a 2.0 instance of its partition untouched.
            verdict = Verdict("2.0", VersionPolicy("1.0", MatchStrategy.STRICT), "o")
            parking.park(instance, verdict, "2026-01-01T00:00:00Z", time.monotonic())

            await until(lambda: unit in p2.held(), 30, "the partition to reach the 2.0 host")
            assert parking.ids() == []  # given up: the 2.0 host decides for it now
            # Taken: the mark went with the acquisition; the 1.0 host has its share again.
            await until(lambda: len(p1.held()) == 1, 30, "the 1.0 host to take its share back")
            await p1.holdings()
            assert p1.wanted() == {}

            # A mark left with an older epoch (a host that knows nothing of versions took
            # the partition since) is void.
            conn = await v1.db.connect()
            try:
                await conn.execute(
                    "INSERT INTO meta (key, value) VALUES (%s, %s)",
                    (f"handover/{unit}", '{"version": "2.0", "epoch": 1}'),
                )
                await conn.execute(
                    "UPDATE partitions SET owner = NULL, expires_at = '-infinity' WHERE unit = %s",
                    (unit,),
                )
            finally:
                await conn.close()
            await p1.holdings()
            assert p1.wanted() == {}
        finally:
            await v2.close()
            await v1.close()

    asyncio.run(main())
