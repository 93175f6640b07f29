"""``bench/run.py --store postgres``: the host on PostgreSQL against DBOS on the same server.

Both keep their state in one PostgreSQL server (``DURABLE_HOST_POSTGRES`` when set, else a
private server started here from Debian's binaries, as the tests start theirs): the host
in a hub schema of its own per run, DBOS in a system database of its own per repetition
(its own backend, created by DBOS). Workloads and their measurement are ``run.py``'s:
a chain of 200 no-op activities, a fan-out of 1,000 and 500 orchestrations of 5 steps (DBOS:
``bench/dbos_workloads.py``), A/B interleaved, the order rotated by one per repetition.
Reported: medians, p99 (the worst, with few repetitions) and ours / DBOS ratios.

``bench/run.py --store postgres-pipeline`` (``run_pipeline_ab``) instead measures the host
against itself: two hosts on the same server, each in a hub of its own, one with its
transactions in pipeline mode (``DURABLE_HOST_POSTGRES_PIPELINE=1``) and one without,
A/B interleaved the same way; reported: medians and pipeline / plain ratios.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from psycopg.conninfo import conninfo_to_dict, make_conninfo

from durable_host.testing import HostProcess

KEYS = ("chain_ms_per_step", "fan_out_s", "many_x5_s")


def server_url(tmp: Path) -> tuple[str, Any]:
    """The server to measure on, and the private server to stop (None when given)."""
    given = os.environ.get("DURABLE_HOST_POSTGRES", "").strip()
    if given:
        return given, None
    from tests.postgres_server import PostgresServer, find_bindir  # the tests' own server

    bindir = find_bindir()
    if bindir is None:
        raise SystemExit("no PostgreSQL server installed (Debian: apt-get install postgresql)")
    server = PostgresServer(bindir).start()
    return server.url, server


def dbos_url(url: str, rep: int) -> str:
    """A SQLAlchemy URL for DBOS's own system database, one per repetition."""
    params = conninfo_to_dict(url)
    host, port = params.get("host", "127.0.0.1"), params.get("port", "5432")
    user, password = params.get("user", ""), params.get("password", "")
    auth = f"{user}:{password}@" if password else (f"{user}@" if user else "")
    return f"postgresql://{auth}{host}:{port}/dbos_bench_{uuid.uuid4().hex[:6]}_{rep}"


def run(
    python: Path,
    tmp: Path,
    size: dict[str, Any],
    reps: int,
    out: Path,
    root: Path,
    host_round: Callable[[HostProcess, dict[str, Any]], dict[str, float]],
    dbos_workloads: Callable[[Path, list[str], Path, dict[str, Any], float], dict[str, float]],
) -> dict[str, Any]:
    """Every repetition of both contestants; the results (also written to ``out``)."""
    began = time.monotonic()
    url, server = server_url(tmp)
    conninfo = make_conninfo(url)
    host = HostProcess(
        root / "bench" / "app",
        "postgres",
        env={"DURABLE_HOST_POSTGRES": conninfo, "DURABLE_HOST_HUB": "Bench" + uuid.uuid4().hex[:8]},
    )
    host.log_path = tmp / "ours_postgres.log"
    runs: dict[str, list[dict[str, float]]] = {"ours_postgres": [], "dbos_postgres": []}
    try:
        host.start(timeout=60)
        host_round(host, {**size, "chain": 10, "fan_out": 20, "many": 5, "calls": 5})  # warm
        contestants = {
            "ours_postgres": lambda rep: {k: host_round(host, size)[k] for k in KEYS},
            "dbos_postgres": lambda rep: dbos_workloads(
                python, ["--db", dbos_url(url, rep)], tmp, size, 1800
            ),
        }
        names = list(contestants)
        for rep in range(reps):
            for name in names[rep % 2 :] + names[: rep % 2]:
                print(f"rep {rep + 1}/{reps}: {name} ...", flush=True)
                runs[name].append(contestants[name](rep))
                out.write_text(json.dumps({"partial": runs}, indent=2))
    finally:
        host.kill()
        if server is not None:
            server.stop()
    workloads = {
        name: {k: _summary([v[k] for v in values]) for k in KEYS} for name, values in runs.items()
    }
    results: dict[str, Any] = {
        "store": "postgres",
        "reps": reps,
        "sizes": {k: size[k] for k in ("chain", "fan_out", "many")},
        "workloads": workloads,
        "ratios": {
            k: workloads["ours_postgres"][k]["median"] / workloads["dbos_postgres"][k]["median"]
            for k in KEYS
        },
        "seconds": time.monotonic() - began,
    }
    out.write_text(json.dumps(results, indent=2))
    print(f"\npostgres, {reps} repetition(s), sizes {results['sizes']}")
    print(f"{'workload':<20}{'ours_postgres':>26}{'dbos_postgres':>26}{'ours/DBOS':>12}")
    for k in KEYS:
        a, b = workloads["ours_postgres"][k], workloads["dbos_postgres"][k]
        print(
            f"{k:<20}{a['median']:>12.2f} (p99 {a['p99']:>7.2f}){b['median']:>12.2f}"
            f" (p99 {b['p99']:>7.2f}){results['ratios'][k]:>12.2f}"
        )
    print(f"\ntotal {results['seconds']:.0f} s")
    return results


AB_KEYS = (
    "chain_ms_per_step",
    "chain_requests_per_step",
    "fan_out_s",
    "many_x5_s",
    "event_ms",
    "entity_call_ms",
    "entity_requests_per_call",
)


def run_pipeline_ab(
    tmp: Path,
    size: dict[str, Any],
    reps: int,
    out: Path,
    root: Path,
    host_round: Callable[[HostProcess, dict[str, Any]], dict[str, float]],
) -> dict[str, Any]:
    """The host with and without pipeline mode, interleaved (module docstring)."""
    began = time.monotonic()
    url, server = server_url(tmp)
    conninfo = make_conninfo(url)
    hosts: dict[str, HostProcess] = {}
    runs: dict[str, list[dict[str, float]]] = {"pipeline": [], "plain": []}
    try:
        for name, flag in (("pipeline", "1"), ("plain", "0")):
            hub = "Bench" + uuid.uuid4().hex[:8]
            env = {
                "DURABLE_HOST_POSTGRES": conninfo,
                "DURABLE_HOST_HUB": hub,
                "DURABLE_HOST_POSTGRES_PIPELINE": flag,
            }
            hosts[name] = HostProcess(root / "bench" / "app", "postgres", env=env)
            hosts[name].log_path = tmp / f"{name}.log"
            hosts[name].start(timeout=60)
            host_round(hosts[name], {**size, "chain": 10, "fan_out": 20, "many": 5, "calls": 5})
        names = list(hosts)
        for rep in range(reps):
            for name in names[rep % 2 :] + names[: rep % 2]:
                print(f"rep {rep + 1}/{reps}: {name} ...", flush=True)
                measured = host_round(hosts[name], size)
                runs[name].append({k: measured[k] for k in AB_KEYS if k in measured})
                out.write_text(json.dumps({"partial": runs}, indent=2))
    finally:
        for host in hosts.values():
            host.kill()
        if server is not None:
            server.stop()
    keys = [k for k in AB_KEYS if all(k in r for rs in runs.values() for r in rs)]
    workloads = {
        name: {k: _summary([v[k] for v in values]) for k in keys} for name, values in runs.items()
    }
    ratios = {k: workloads["pipeline"][k]["median"] / workloads["plain"][k]["median"] for k in keys}
    results = {
        "store": "postgres",
        "reps": reps,
        "sizes": {k: size[k] for k in ("chain", "fan_out", "many")},
        "workloads": workloads,
        "ratios": ratios,
        "seconds": time.monotonic() - began,
    }
    out.write_text(json.dumps(results, indent=2))
    print(f"\npostgres, pipeline mode A/B, {reps} repetition(s), sizes {results['sizes']}")
    print(f"{'workload':<26}{'pipeline':>24}{'plain':>24}{'pipeline/plain':>16}")
    for k in keys:
        a, b = workloads["pipeline"][k], workloads["plain"][k]
        print(
            f"{k:<26}{a['median']:>10.2f} (max {a['p99']:>7.2f}){b['median']:>10.2f}"
            f" (max {b['p99']:>7.2f}){ratios[k]:>16.2f}"
        )
    print(f"\ntotal {results['seconds']:.0f} s")
    return results


def _summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "median": ordered[len(ordered) // 2]
        if len(ordered) % 2
        else sum(ordered[len(ordered) // 2 - 1 : len(ordered) // 2 + 1]) / 2,
        "p99": ordered[-1],
        "n": len(ordered),
    }
