"""Measure Azurite and the Azure store on this machine; prints tables (not a test).

    python -m tests.store.measure_azurite [--rounds N]

1. Round trips to Azurite (in-memory mode): a point read, an upsert, entity-group
   transactions of 10 and 100 rows, a lease renewal; then the Azure store's own steps
   (fetch, small commit, commit sending a message to another instance) against the
   SQLite store's, as a ratio measured in the same run.
2. What Azurite with ``--location`` keeps when it is killed (SIGKILL) some time after it
   acknowledged a write, and when it is stopped (SIGTERM).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from azure.data.tables import UpdateMode
from azure.data.tables.aio import TableServiceClient
from azure.storage.blob.aio import BlobLeaseClient, BlobServiceClient

from durable_host.core.orchestration import Episode, Outgoing
from durable_host.ops import azurite
from durable_host.store.azure import AzureStore
from durable_host.store.sqlite.store import SqliteStore

T0 = "2026-01-01T00:00:00.000000Z"


async def timed(rounds: int, step: Callable[[int], Awaitable[Any]]) -> tuple[float, float]:
    samples = []
    for n in range(rounds):
        start = time.perf_counter()
        await step(n)
        samples.append((time.perf_counter() - start) * 1000)
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.9)]


async def raw_round_trips(connection: str, rounds: int) -> list[tuple[str, float, float]]:
    tables = TableServiceClient.from_connection_string(connection)
    blobs = BlobServiceClient.from_connection_string(connection)
    table = await tables.create_table_if_not_exists("Measure" + uuid.uuid4().hex[:8])
    container = blobs.get_container_client("measure-" + uuid.uuid4().hex[:8])
    await container.create_container()
    blob = container.get_blob_client("lease")
    await blob.upload_blob(b"")
    lease = BlobLeaseClient(blob)
    await lease.acquire(lease_duration=15)
    await table.upsert_entity({"PartitionKey": "p", "RowKey": "r", "V": "x" * 200})
    row = {"V": "x" * 200}
    rows = []
    try:
        rows.append(("point read", *await timed(rounds, lambda n: table.get_entity("p", "r"))))
        rows.append(
            (
                "upsert",
                *await timed(
                    rounds,
                    lambda n: table.upsert_entity(
                        {"PartitionKey": "p", "RowKey": f"u{n}", **row}, mode=UpdateMode.REPLACE
                    ),
                ),
            )
        )
        for size in (10, 100):
            rows.append(
                (
                    f"transaction of {size} rows",
                    *await timed(
                        rounds,
                        lambda n, size=size: table.submit_transaction(
                            [
                                (
                                    "upsert",
                                    {"PartitionKey": f"b{size}-{n}", "RowKey": f"{i}", **row},
                                )
                                for i in range(size)
                            ]
                        ),
                    ),
                )
            )
        rows.append(("lease renewal", *await timed(rounds, lambda n: lease.renew())))
    finally:
        await lease.release()
        await table.close()
        await tables.close()
        await container.close()
        await blobs.close()
    return rows


async def store_steps(store: Any, rounds: int) -> dict[str, tuple[float, float]]:
    await store.open()
    try:
        ids = [f"m{n}" for n in range(rounds)]
        for instance_id in ids:
            await store.send(instance_id, {"kind": "start", "event": {"EventType": 0}}, T0)

        async def commit(n: int, outbox: list[Outgoing]) -> None:
            messages = await store.fetch_messages(ids[n], T0)
            await store.commit_episode(
                ids[n],
                Episode(
                    consumed=[i for i, _ in messages],
                    events=[{"EventType": 12}, {"EventType": 4}],
                    replace_history=n % 2 == 0 and not outbox,
                    execution_id="e",
                    status="Running",
                    name="m",
                    outbox=outbox,
                ),
                T0,
            )

        results = {
            "fetch (empty inbox)": await timed(
                rounds, lambda n: store.fetch_messages(f"none{n}", T0)
            )
        }
        results["fetch + commit (own partition)"] = await timed(rounds, lambda n: commit(n, []))
        for instance_id in ids:
            await store.send(instance_id, {"kind": "event", "event": {"EventType": 15}}, T0)
        results["fetch + commit + message to another instance"] = await timed(
            rounds,
            lambda n: commit(n, [Outgoing("message", f"other{n}", {"kind": "event", "event": {}})]),
        )
        return results
    finally:
        await store.close()


async def persistence(seconds: float, stop: signal.Signals) -> bool:
    """Write one row to an Azurite on disk, wait, kill or stop it, restart: is the row there?"""
    with tempfile.TemporaryDirectory() as tmp:
        location, ports = Path(tmp), azurite.free_ports(3)
        emulator = azurite.start(location, ports)  # type: ignore[arg-type]
        tables = TableServiceClient.from_connection_string(emulator.connection_string)
        table = await tables.create_table_if_not_exists("Persist")
        await table.upsert_entity({"PartitionKey": "p", "RowKey": "r"})
        await table.close()
        await tables.close()
        await asyncio.sleep(seconds)
        emulator.process.send_signal(stop)
        emulator.process.wait(20)
        emulator = azurite.start(location, ports)  # type: ignore[arg-type]
        tables = TableServiceClient.from_connection_string(emulator.connection_string)
        try:
            found = [
                e async for e in tables.get_table_client("Persist").query_entities("RowKey eq 'r'")
            ]
        except Exception:  # noqa: BLE001 - a lost table answers 404: the row is gone too
            found = []
        await tables.close()
        emulator.stop()
        return bool(found)


async def main(rounds: int) -> None:
    emulator = azurite.start(None, azurite.free_ports(3), in_memory=True)  # type: ignore[arg-type]
    try:
        print(f"Azurite round trips ({rounds} each, ms)")
        print(f"{'operation':48} {'median':>8} {'p90':>8}")
        for name, median, p90 in await raw_round_trips(emulator.connection_string, rounds):
            print(f"{name:48} {median:8.2f} {p90:8.2f}")
        with tempfile.TemporaryDirectory() as tmp:
            sqlite = await store_steps(SqliteStore(Path(tmp) / "m.db"), rounds)
        azure = await store_steps(
            AzureStore(emulator.connection_string, "M" + uuid.uuid4().hex[:8]), rounds
        )
        print(f"\nStore steps ({rounds} each, median ms)")
        print(f"{'step':48} {'azure':>8} {'sqlite':>8} {'ratio':>7}")
        for name in azure:
            a, s = azure[name][0], sqlite[name][0]
            print(f"{name:48} {a:8.2f} {s:8.2f} {a / s:7.1f}")
    finally:
        emulator.stop()
    print("\nAzurite --location: is an acknowledged write there after a restart?")
    for stop, delays in ((signal.SIGKILL, (0.5, 2.0, 4.0, 6.0)), (signal.SIGTERM, (0.5,))):
        for seconds in delays:
            kept = await persistence(seconds, stop)
            print(f"{stop.name} {seconds:.1f}s after the write: {'kept' if kept else 'LOST'}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=200)
    asyncio.run(main(parser.parse_args().rounds))
