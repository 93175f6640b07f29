"""``bench/run.py --stores sqlite,postgres,azure``: the host on each store beside DBOS on SQLite
(WAL) and DBOS on PostgreSQL, in one run, interleaved.

One PostgreSQL server (``DURABLE_HOST_POSTGRES`` when set, else a private one started here,
as the tests start theirs) holds the host's hub and DBOS's system database; Azure Storage is
an in-memory Azurite started here. Each repetition runs every contestant once, the order
rotated by one per repetition: chain, fan-out and M x 5 (``run.host_round`` for the host,
``bench/dbos_workloads.py`` for DBOS). Floors measured in the same run: one durable SQLite
commit (WAL, ``synchronous=FULL``), one PostgreSQL commit round trip (an insert and its
COMMIT on that server, autocommit), one loopback HTTP request to the host, one Azurite round
trip. Printed: medians (p99: the worst of few), the host's storage round trips per chain
step on the network stores (the bench client's status reads included), and the ratios
ours / DBOS-SQLite-WAL and ours / DBOS-PostgreSQL.

``--smoke`` uses tiny sizes and one repetition; the test suite runs it with ``--no-dbos``
(DBOS's environment is the bench's, not the tests'): it checks that the script runs and
prints its table, never a time.
"""

from __future__ import annotations

import json
import os
import statistics
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

from durable_host.testing import HostProcess

KEYS = ("chain_ms_per_step", "fan_out_s", "many_x5_s")
EXTRA = ("chain_requests_per_step",)
DBOS = ("dbos_sqlite_wal", "dbos_postgres")
SMOKE: dict[str, Any] = {"chain": 5, "fan_out": 10, "many": 5, "calls": 2}


def postgres_commit_ms(url: str, count: int = 200) -> float:
    """One durable commit round trip on the server: an insert in autocommit mode."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TEMP TABLE floor (k serial PRIMARY KEY, v text)")
        # A temporary table is not WAL-logged: a table of its own, dropped at the end.
        name = "bench_floor_" + uuid.uuid4().hex[:8]
        conn.execute(f"CREATE TABLE {name} (k serial PRIMARY KEY, v text)")
        try:
            started = time.perf_counter()
            for _ in range(count):
                conn.execute(f"INSERT INTO {name} (v) VALUES (%s)", ("x" * 200,))
            return (time.perf_counter() - started) / count * 1000
        finally:
            conn.execute(f"DROP TABLE {name}")


def run(
    stores: list[str],
    python: Path | None,
    tmp: Path,
    size: dict[str, Any],
    reps: int,
    out: Path,
    root: Path,
    host_round: Callable[..., dict[str, float]],
    dbos_workloads: Callable[[Path, list[str], Path, dict[str, Any], float], dict[str, float]],
    loopback_ms: Callable[[HostProcess], float],
    sqlite_commit_ms: Callable[[Path], float],
) -> dict[str, Any]:
    """Every repetition of every contestant; the results (also written to ``out``).
    ``python``: DBOS's environment, None to leave DBOS out."""
    from bench import postgres_bench

    began = time.monotonic()
    floors: dict[str, float] = {"sqlite_commit_ms": sqlite_commit_ms(tmp / "floor.db")}
    hosts: dict[str, HostProcess] = {}
    server = emulator = None
    url = ""
    contestants: dict[str, Callable[[int], dict[str, float]]] = {}
    try:
        if "postgres" in stores or python is not None:
            url, server = postgres_bench.server_url(tmp)
            floors["postgres_commit_ms"] = postgres_commit_ms(url)
        if "sqlite" in stores:
            hosts["ours_sqlite"] = HostProcess(root / "bench" / "app", f"sqlite:{tmp}/ours.db")
        if "postgres" in stores:
            env = {
                "DURABLE_HOST_POSTGRES": make_conninfo(url),
                "DURABLE_HOST_HUB": "Bench" + uuid.uuid4().hex[:8],
            }
            hosts["ours_postgres"] = HostProcess(root / "bench" / "app", "postgres", env=env)
            hosts["ours_postgres"].log_path = tmp / "ours_postgres.log"
        if "azure" in stores:
            from bench import host_bench
            from durable_host.ops import azurite

            blob, queue, table = azurite.free_ports(3)
            emulator = azurite.start(
                None, (blob, queue, table), in_memory=True, log=tmp / "azurite.log"
            )
            os.environ["AzureWebJobsStorage"] = emulator.connection_string
            floors["azurite_round_trip_ms"] = host_bench.azurite_round_trip_ms(
                emulator.connection_string
            )
            hosts["ours_azure"] = HostProcess(root / "bench" / "app", "azure")
        warm = {**SMOKE, "calls": 1}
        for name, host in hosts.items():
            host.start(timeout=60)
            host_round(host, warm, latencies=False)  # imports, statements, first episodes
            contestants[name] = _ours(host, size, host_round)
        floors["loopback_http_ms"] = loopback_ms(next(iter(hosts.values())))
        if python is not None:
            db = tmp / "dbos-wal-{rep}.sqlite"
            contestants["dbos_sqlite_wal"] = lambda rep: dbos_workloads(
                python, ["--db", str(db).format(rep=rep), "--journal", "wal"], tmp, size, 1800
            )
            contestants["dbos_postgres"] = lambda rep: dbos_workloads(
                python, ["--db", postgres_bench.dbos_url(url, rep)], tmp, size, 1800
            )
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in contestants}
        names = list(contestants)
        for rep in range(reps):
            shift = rep % len(names)
            for name in names[shift:] + names[:shift]:
                print(f"rep {rep + 1}/{reps}: {name} ...", flush=True)
                runs[name].append(contestants[name](rep))
                out.write_text(json.dumps({"partial": runs, "floors": floors}, indent=2))
    finally:
        for host in hosts.values():
            host.kill()
        if emulator is not None:
            emulator.stop()
        if server is not None:
            server.stop()
    workloads = {
        name: {k: _summary([v[k] for v in values]) for k in (*KEYS, *EXTRA) if k in values[0]}
        for name, values in runs.items()
    }
    results: dict[str, Any] = {
        "stores": stores,
        "reps": reps,
        "sizes": {k: size[k] for k in ("chain", "fan_out", "many")},
        "floors": floors,
        "workloads": workloads,
        "ratios": {
            f"{ours}/{dbos}:{k}": workloads[ours][k]["median"] / workloads[dbos][k]["median"]
            for ours in hosts
            for dbos in DBOS
            if dbos in workloads
            for k in KEYS
        },
        "seconds": time.monotonic() - began,
    }
    out.write_text(json.dumps(results, indent=2))
    report(results)
    return results


def _ours(
    host: HostProcess,
    size: dict[str, Any],
    host_round: Callable[..., dict[str, float]],
) -> Callable[[int], dict[str, float]]:
    def one(rep: int) -> dict[str, float]:
        measured = host_round(host, size, latencies=False)
        return {k: measured[k] for k in (*KEYS, *EXTRA) if k in measured}

    return one


def report(results: dict[str, Any]) -> None:
    workloads = results["workloads"]
    print(f"\nstores {','.join(results['stores'])}, {results['reps']} repetition(s),", end="")
    print(f" sizes {results['sizes']}")
    print("floors (ms): " + ", ".join(f"{k} {v:.3f}" for k, v in results["floors"].items()))
    names = list(workloads)
    print(f"\n{'workload':<24}" + "".join(f"{n:>26}" for n in names))
    for key in (*KEYS, *EXTRA):
        cells = "".join(
            f"{w[key]['median']:>14.2f} (p99 {w[key]['p99']:>6.2f})" if key in w else f"{'-':>26}"
            for w in workloads.values()
        )
        print(f"{key:<24}{cells}")
    if results["ratios"]:
        print("\nratios ours / DBOS (medians)")
        for key, value in results["ratios"].items():
            print(f"  {key:<50} {value:6.2f}")
    else:
        print("\nno DBOS in this run (its environment, .venv-bench, is not installed): no ratios")
    print(f"\ntotal {results['seconds']:.0f} s")


def _summary(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "p99": max(values), "n": len(values)}
