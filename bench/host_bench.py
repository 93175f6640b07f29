"""Benchmark the durable host on its embedded SQLite store; prints tables and ratios.

Workloads (one host process, one run, so ratios are comparable on a noisy machine):
  * a sequential chain of 200 no-op activities: per-step p50/p99 and steps/s;
  * a fan-out/fan-in of 1,000 activities;
  * SDK replay time per episode, reported apart from the commit;
  * entities: signals/s into one entity, call round trip from an orchestration (p50/p99),
    ops/s across 100 entities;
  * one durable SQLite commit (WAL, synchronous=FULL) measured in the same run,
    and every step cost divided by it.

With ``--store azure`` the same workloads run on Azure Storage (an in-memory Azurite started
for the run, from the project's npm package), and the table adds storage round trips per
activity step and the step time divided by one Azurite round trip, measured in the same run.

Usage: ``python bench/host_bench.py [--store sqlite|azure] [--steps 200] [--fan-out 1000]``
"""

from __future__ import annotations

import argparse
import concurrent.futures
import itertools
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time
import urllib.request
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from durable_host.testing import WEBHOOK, HostProcess, wait_for


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] if ordered else float("nan")


def sqlite_commit_ms(path: Path, count: int = 300) -> float:
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)")
    started = time.perf_counter()
    for i in range(count):
        db.execute("BEGIN IMMEDIATE")
        db.execute("INSERT INTO t (v) VALUES (?)", ("x" * 200,))
        db.execute("COMMIT")
    elapsed = time.perf_counter() - started
    db.close()
    return elapsed / count * 1000


def step_times(host: HostProcess, instance_id: str, event_type: str) -> list[float]:
    """Milliseconds between consecutive ``event_type`` rows of an instance's history (the
    management API's view, so it reads the same on every store)."""
    view = host.status(instance_id, "?showHistory=true") or {}
    stamps = [e["Timestamp"] for e in view.get("historyEvents", []) if e["EventType"] == event_type]
    parsed = [datetime.fromisoformat(s) for s in stamps]
    return [(b - a).total_seconds() * 1000 for a, b in itertools.pairwise(parsed)]


def run_to_completion(
    host: HostProcess, name: str, body: dict[str, Any], timeout: float = 600
) -> tuple[str, float]:
    started = time.perf_counter()
    instance = host.start_orchestration(name, body)
    host.wait_for_status(instance, timeout=timeout)
    return instance, time.perf_counter() - started


def azurite_round_trip_ms(connection: str, count: int = 200) -> float:
    """Median time of one table point read against the Azurite under test."""
    from azure.data.tables import TableServiceClient

    service = TableServiceClient.from_connection_string(connection)
    table = service.create_table_if_not_exists("BenchRoundTrip")
    table.upsert_entity({"PartitionKey": "p", "RowKey": "r", "v": 1})
    times = []
    for _ in range(count):
        started = time.perf_counter()
        table.get_entity("p", "r")
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def metrics(host: HostProcess) -> dict[str, Any]:
    return json.loads(urllib.request.urlopen(host.base_url + "/admin/host/metrics").read())


def table(title: str, rows: list[tuple[str, str]]) -> None:
    print(f"\n{title}")
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"  {key:<{width}}  {value}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--store", choices=("sqlite", "azure"), default="sqlite")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--fan-out", type=int, default=1000)
    parser.add_argument("--signals", type=int, default=2000)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-"))
    emulator = None
    if args.store == "azure":
        from durable_host.ops import azurite

        blob, queue, table = azurite.free_ports(3)
        emulator = azurite.start(
            None, (blob, queue, table), in_memory=True, log=tmp / "azurite.log"
        )
        os.environ["AzureWebJobsStorage"] = emulator.connection_string
        unit_ms = azurite_round_trip_ms(emulator.connection_string)
        print(f"one Azurite round trip (table point read, median): {unit_ms:.3f} ms", flush=True)
        spec = "azure"
    else:
        unit_ms = sqlite_commit_ms(tmp / "raw.db")
        print(f"one durable SQLite commit (WAL, synchronous=FULL): {unit_ms:.3f} ms", flush=True)
        spec = f"sqlite:{tmp / 'bench.db'}"
    host = HostProcess(ROOT / "bench" / "app", spec).start()
    try:
        orchestrations(host, args, unit_ms)
        entities(host, args, unit_ms)
        assert host.process is not None  # started above
        rss = Path(f"/proc/{host.process.pid}/status").read_text().split("VmHWM:")[1].split()[0]
        print(f"\nhost peak RSS: {int(rss) / 1024:.1f} MiB")
    finally:
        host.kill()
        if emulator is not None:
            emulator.stop()


def orchestrations(host: HostProcess, args: argparse.Namespace, unit_ms: float) -> None:
    unit = "Azurite round trip" if args.store == "azure" else "raw commit"
    print(f"sequential chain of {args.steps} activities ...", flush=True)
    before = metrics(host).get("store_round_trips", 0)
    chain_id, chain_s = run_to_completion(host, "chain", {"steps": args.steps})
    after = metrics(host)
    steps = step_times(host, chain_id, "TaskCompleted")
    print(f"fan-out/fan-in of {args.fan_out} activities ...", flush=True)
    _, fan_s = run_to_completion(host, "fan_out", {"count": args.fan_out})
    replay, commit = after["replay_ms"], after["commit_ms"]
    rows = [
        ("chain: per step p50 / p99", f"{pct(steps, 0.5):.2f} / {pct(steps, 0.99):.2f} ms"),
        ("chain: steps/s", f"{args.steps / chain_s:.0f}"),
        (
            "chain: SDK replay per episode p50 / p99",
            f"{replay['p50']:.2f} / {replay['p99']:.2f} ms",
        ),
        (
            "chain: store commit per episode p50 / p99",
            f"{commit['p50']:.2f} / {commit['p99']:.2f} ms",
        ),
        (
            f"fan-out {args.fan_out}: total",
            f"{fan_s:.2f} s ({args.fan_out / fan_s:.0f} activities/s)",
        ),
        (f"ratio: step p50 / {unit}", f"{pct(steps, 0.5) / unit_ms:.1f}x"),
        (f"ratio: episode commit p50 / {unit}", f"{commit['p50'] / unit_ms:.1f}x"),
    ]
    if "store_round_trips" in after:
        per_step = (after["store_round_trips"] - before) / args.steps
        rows.append(("chain: storage round trips per activity step", f"{per_step:.1f}"))
    table(f"orchestrations ({args.store} store)", rows)


def signal(host: HostProcess, key: str) -> int:
    return host.post(f"{WEBHOOK}/entities/counter/{key}?op=add", 1).status


def entity_value(host: HostProcess, key: str) -> int:
    resp = host.get(f"{WEBHOOK}/entities/counter/{key}")
    return resp.json() if resp.status == 200 else 0


def entities(host: HostProcess, args: argparse.Namespace, unit_ms: float) -> None:
    unit = "Azurite round trip" if args.store == "azure" else "raw commit"
    print(f"{args.signals} signals into one entity ...", flush=True)
    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda _: signal(host, "one"), range(args.signals)))
    wait_for(lambda: entity_value(host, "one") == args.signals, 300, "signals applied", 0.01)
    one_s = time.perf_counter() - started
    print(f"{args.calls} sequential calls from an orchestration ...", flush=True)
    calls_id, _ = run_to_completion(host, "entity_calls", {"key": "calls", "calls": args.calls})
    trips = step_times(host, calls_id, "EventRaised")
    print("100 entities x 20 signals ...", flush=True)
    started = time.perf_counter()
    keys = [f"e{i}" for i in range(100)]
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda k: signal(host, k), [k for k in keys for _ in range(20)]))
    wait_for(lambda: all(entity_value(host, k) == 20 for k in keys), 300, "all entities", 0.05)
    many_s = time.perf_counter() - started
    table(
        f"entities ({args.store} store)",
        [
            ("signals/s into one entity (HTTP accept + apply)", f"{args.signals / one_s:.0f}"),
            (
                "call round trip from an orchestration p50 / p99",
                f"{pct(trips, 0.5):.2f} / {pct(trips, 0.99):.2f} ms",
            ),
            ("ops/s across 100 entities", f"{2000 / many_s:.0f}"),
            (f"ratio: call round trip p50 / {unit}", f"{pct(trips, 0.5) / unit_ms:.1f}x"),
            ("references", "Azure Storage ~64 entity ops/s; Netherite ~1,400 signals/s (2 cores)"),
        ],
    )


if __name__ == "__main__":
    main()
