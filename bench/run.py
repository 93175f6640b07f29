"""Every benchmark in one command: the durable host on both stores against DBOS on SQLite.

One invocation measures, on this machine and in this run (so ratios compare like with like
on a noisy machine):

* floors: one durable SQLite commit (WAL, synchronous=FULL), one loopback HTTP request to
  the host, one Azurite round trip (a table point read);
* the host (``bench/app``) on SQLite in its default configuration (incremental replay, with
  a full replay whenever an instance's history doubled) and with a full replay every episode
  (``DURABLE_HOST_SESSIONS=0``, ``ours_sqlite_full``), and on Azure Storage (an in-memory
  Azurite, default configuration): a chain of
  N no-op activities (ms per step; on Azure Storage also the storage requests per step,
  the client's status reads included), a fan-out of N activities, M orchestrations of 5 steps
  started one after the other by one client over one keep-alive connection (as any HTTP
  client library's connection pool sends them; DBOS starts its workflows in process) and
  waited for with one status query every 50 ms (DBOS waits on its handles in process),
  external-event latency (raise to completed), timer latency (completed
  minus due), entity calls from an orchestration (ms per call), one agent round of the
  kernel (the offline planner, one tool), crash to resume (SIGKILL mid-chain, restart, time
  to the next completed step);
* the cost of one step as history grows (``bench/replay_cost.py``: 10/100/1,000 steps, the
  engine's own episode timing, fast replay and incremental replay);
* DBOS Transact (``requirements-bench.txt``, installed into ``.venv-bench`` on first use)
  on SQLite with the default rollback journal and with WAL: chain, fan-out, M x 5.

Repetitions are A/B interleaved: each repetition runs every contestant once, in an order
rotated by one per repetition (Azure Storage, the slowest, runs in the first ``--azure-reps``
repetitions only, default 1). Reported: median and p99 (the worst, with few repetitions)
of the repetitions, and ours / DBOS ratios of the medians. Results go to a JSON file.

Usage: ``python bench/run.py [--quick] [--reps 3] [--out bench-results.json]``;
``--store postgres``: the host on PostgreSQL against DBOS on the same PostgreSQL server
instead (``bench/postgres_bench.py``); ``--stores sqlite,postgres,azure``: the host on each
of those stores beside DBOS on SQLite (WAL) and DBOS on PostgreSQL, interleaved, with the
floors and the ratios (``bench/all_stores.py``; ``--smoke``: tiny sizes, the test suite's
run, with ``--no-dbos``).
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import host_bench, replay_cost
from durable_host.testing import WEBHOOK, HostProcess, wait_for

BENCH_VENV = ROOT / ".venv-bench"
FULL: dict[str, Any] = {
    "chain": 200,
    "fan_out": 1000,
    "many": 500,
    "calls": 100,
    "lengths": "10,100,1000",
}
QUICK: dict[str, Any] = {"chain": 30, "fan_out": 100, "many": 30, "calls": 20, "lengths": "10,100"}


def stamp(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def completed(host: HostProcess, instance_id: str, timeout: float = 600) -> tuple[float, float]:
    """Wait for the instance to complete; its first and last history timestamps (the
    status row's times have whole seconds only; history events carry microseconds)."""
    status = host.wait_for_status(instance_id, timeout=timeout)
    assert status["runtimeStatus"] == "Completed", status
    events = (host.status(instance_id, "?showHistory=true") or {})["historyEvents"]
    return stamp(events[0]["Timestamp"]), stamp(events[-1]["Timestamp"])


def span(times: tuple[float, float]) -> float:
    return times[1] - times[0]


# --- the host -----------------------------------------------------------------------------


def host_round(
    host: HostProcess, size: dict[str, Any], *, latencies: bool = True
) -> dict[str, float]:
    """One repetition of every workload on a running host; seconds or milliseconds
    (``latencies``: False leaves out the external event, the timer and the entity calls)."""
    out: dict[str, float] = {}
    trips = host_bench.metrics(host).get("store_round_trips")  # counted by network stores
    chain = host.start_orchestration("chain", {"steps": size["chain"]})
    out["chain_ms_per_step"] = span(completed(host, chain)) * 1000 / size["chain"]
    if trips is not None:  # the chain's requests, its status reads above included
        after = host_bench.metrics(host)["store_round_trips"]
        out["chain_requests_per_step"] = (after - trips) / size["chain"]
    fan = host.start_orchestration("fan_out", {"count": size["fan_out"]})
    out["fan_out_s"] = span(completed(host, fan))
    started = time.time()
    prefix = f"many-{uuid.uuid4().hex[:8]}-"
    ids = start_many(host, "chain", {"steps": 5}, size["many"], prefix)
    out["many_starts_s"] = time.time() - started  # the sequential start requests alone
    all_finished(host, prefix)
    last = max(completed(host, i)[1] for i in ids)
    out["many_x5_s"] = last - started
    if not latencies:
        return out
    waiter = host.start_orchestration("waiter")
    wait_for(lambda: (host.status(waiter) or {}).get("runtimeStatus") == "Running", 30, "waiter")
    time.sleep(0.2)  # let it park: the latency measured is a cold wake-up
    raised = time.time()
    assert host.post(f"{WEBHOOK}/instances/{waiter}/raiseEvent/go", "x").status == 202
    out["event_ms"] = (completed(host, waiter)[1] - raised) * 1000
    sleeper = host.start_orchestration("sleeper", {"seconds": 1})
    out["timer_late_ms"] = (span(completed(host, sleeper)) - 1.0) * 1000
    trips = host_bench.metrics(host).get("store_round_trips")
    calls = host.start_orchestration("entity_calls", {"key": "k", "calls": size["calls"]})
    out["entity_call_ms"] = span(completed(host, calls)) * 1000 / size["calls"]
    if trips is not None:  # as the chain's: the status reads while it waits included
        after = host_bench.metrics(host)["store_round_trips"]
        out["entity_requests_per_call"] = (after - trips) / size["calls"]
    return out


def all_finished(host: HostProcess, prefix: str, timeout: float = 600) -> None:
    """Wait until no instance whose id starts with ``prefix`` is pending or running: one
    status query every 50 ms, as a client waiting for a batch would ask, so the waiting adds
    little load to the host while it still runs the batch (the per-instance status reads
    come after, when all are done)."""
    query = f"{WEBHOOK}/instances?runtimeStatus=Pending,Running&instanceIdPrefix={prefix}&top=1"
    wait_for(lambda: host.get(query).json() == [], timeout, "every instance to finish")


def start_many(host: HostProcess, name: str, body: Any, count: int, prefix: str) -> list[str]:
    """Start ``count`` instances, ids ``prefix`` and a number, one after the other over one
    keep-alive connection."""
    address = urllib.parse.urlsplit(host.base_url)
    connection = http.client.HTTPConnection(address.hostname or "127.0.0.1", address.port)
    payload = json.dumps(body)
    ids = []
    try:
        for n in range(count):
            connection.request(
                "POST",
                f"{WEBHOOK}/orchestrators/{name}/{prefix}{n}",
                payload,
                {"Content-Type": "application/json"},
            )
            response = connection.getresponse()
            answer = response.read()
            assert response.status == 202, (response.status, answer)
            ids.append(json.loads(answer)["id"])
    finally:
        connection.close()
    return ids


def crash_to_resume(spec: str, env: dict[str, str], steps: int) -> dict[str, float]:
    """SIGKILL a host mid-chain, start it again: seconds to the next completed step, from
    the restart's spawn and from the moment it listens."""
    host = HostProcess(ROOT / "bench" / "app", spec, env=dict(env)).start()
    instance = host.start_orchestration("chain", {"steps": steps})

    def progressed() -> bool:
        view = host.status(instance, "?showHistory=true") or {}
        done = [e for e in view.get("historyEvents", []) if e["EventType"] == "TaskCompleted"]
        return len(done) >= steps // 3

    wait_for(progressed, 120, "a third of the chain", 0.02)
    assert host.process is not None  # started above
    host.process.send_signal(signal.SIGKILL)
    host.process.wait(10)
    killed = time.time()
    spawned = time.time()
    host.start()
    listening = time.time()
    try:
        view = wait_for(
            lambda: _completed_after(host, instance, killed), 60, "a step after the restart", 0.02
        )
        completed(host, instance)
    finally:
        host.kill()
    return {"from_spawn_s": view - spawned, "from_listening_s": view - listening}


def _completed_after(host: HostProcess, instance: str, moment: float) -> float | None:
    view = host.status(instance, "?showHistory=true") or {}
    for event in view.get("historyEvents", []):
        if event["EventType"] == "TaskCompleted" and stamp(event["Timestamp"]) > moment:
            return stamp(event["Timestamp"])
    return None


def agent_round_ms(tmp: Path) -> float:
    from bench import agent_round
    from tests.app.turn_support import turn_env

    db = tmp / "agent.db"
    host = HostProcess(ROOT, f"sqlite:{db}", env=turn_env(tmp, {"AGENT_MAX_ROUNDS": "3"}))
    host.start()
    try:
        agent_round.one_turn(host, db, 1, "warmup")
        return agent_round.one_turn(host, db, 1, "bench")["ms_per_round"]
    finally:
        host.kill()


def loopback_ms(host: HostProcess, count: int = 200) -> float:
    times = []
    for _ in range(count):
        started = time.perf_counter()
        urllib.request.urlopen(host.base_url + "/admin/host/status").read()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


# --- DBOS -----------------------------------------------------------------------------


def bench_python() -> Path:
    python = BENCH_VENV / "bin" / "python"
    if not python.exists():
        print("creating .venv-bench (DBOS, pinned in requirements-bench.txt) ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(BENCH_VENV)], check=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", "-r", str(ROOT / "requirements-bench.txt")],
            check=True,
        )
    return python


def host_contestant(host: HostProcess, size: dict[str, Any]) -> Callable[[int], dict[str, float]]:
    return lambda rep: host_round(host, size)


def dbos_contestant(
    python: Path, journal: str, tmp: Path, size: dict[str, Any]
) -> Callable[[int], dict[str, float]]:
    return lambda rep: dbos_round(python, journal, tmp, size, rep)


def dbos_round(
    python: Path, journal: str, tmp: Path, size: dict[str, Any], rep: int
) -> dict[str, float]:
    db = tmp / f"dbos-{journal}-{rep}.sqlite"
    return dbos_workloads(python, ["--db", str(db), "--journal", journal], tmp, size, 900)


def dbos_workloads(
    python: Path, database: list[str], tmp: Path, size: dict[str, Any], timeout: float
) -> dict[str, float]:
    """One run of ``dbos_workloads.py`` in DBOS's environment against ``database`` (its
    ``--db`` and store options), in this bench's units."""
    result = subprocess.run(
        [
            str(python),
            str(ROOT / "bench" / "dbos_workloads.py"),
            *database,
            "--chain",
            str(size["chain"]),
            "--fan-out",
            str(size["fan_out"]),
            "--many",
            f"{size['many']}x5",
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=tmp,
        check=True,
    )
    raw = json.loads(result.stdout.strip().splitlines()[-1])
    return {
        "chain_ms_per_step": raw["chain"] * 1000 / size["chain"],
        "fan_out_s": raw["fan_out"],
        "many_x5_s": raw["many"],
    }


# --- the run ----------------------------------------------------------------------------


def summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return {"median": statistics.median(ordered), "p99": p99, "n": len(ordered)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, one repetition")
    parser.add_argument("--reps", type=int, default=None, help="repetitions (default 3, quick 1)")
    parser.add_argument("--no-azure", action="store_true", help="skip the Azure Storage runs")
    parser.add_argument("--azure-reps", type=int, default=1, help="repetitions on Azure Storage")
    parser.add_argument("--out", default="bench-results.json")
    parser.add_argument(
        "--store",
        choices=("all", "postgres", "postgres-pipeline"),
        default="all",
        help="postgres: only the host on PostgreSQL against DBOS on the same server;"
        " postgres-pipeline: the host on PostgreSQL with and without pipeline mode",
    )
    parser.add_argument(
        "--stores",
        default=None,
        help="sqlite,postgres,azure (any of them): the host on each store beside DBOS on SQLite"
        " (WAL) and on PostgreSQL, interleaved (bench/all_stores.py)",
    )
    parser.add_argument("--no-dbos", action="store_true", help="with --stores: the host alone")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="with --stores: tiny sizes, one repetition (the test suite's check that the"
        " script runs)",
    )
    args = parser.parse_args()
    size = QUICK if args.quick else FULL
    reps = args.reps or (1 if args.quick else 3)
    if args.store == "postgres-pipeline":
        from bench import postgres_bench

        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        tmp = Path(tempfile.mkdtemp(prefix="bench-run-"))
        postgres_bench.run_pipeline_ab(tmp, size, reps, Path(args.out), ROOT, host_round)
        return 0
    if args.stores is not None:
        return all_stores_run(args, size, reps)
    if args.store == "postgres":
        from bench import postgres_bench

        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        tmp = Path(tempfile.mkdtemp(prefix="bench-run-"))
        postgres_bench.run(
            bench_python(), tmp, size, reps, Path(args.out), ROOT, host_round, dbos_workloads
        )
        return 0
    began = time.monotonic()
    # SIGTERM unwinds like Ctrl-C, so the hosts and Azurite started here are stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    tmp = Path(tempfile.mkdtemp(prefix="bench-run-"))
    python = bench_python()
    floors = {"sqlite_commit_ms": host_bench.sqlite_commit_ms(tmp / "floor.db")}
    emulator = None
    contestants: dict[str, Callable[[int], dict[str, float]]] = {}
    hosts: dict[str, HostProcess] = {}
    for name, env in (
        ("ours_sqlite", {}),
        ("ours_sqlite_full", {"DURABLE_HOST_SESSIONS": "0"}),
    ):
        hosts[name] = HostProcess(ROOT / "bench" / "app", f"sqlite:{tmp / name}.db", env=env)
    if not args.no_azure:
        from durable_host.ops import azurite

        blob, queue, table = azurite.free_ports(3)
        emulator = azurite.start(
            None, (blob, queue, table), in_memory=True, log=tmp / "azurite.log"
        )
        os.environ["AzureWebJobsStorage"] = emulator.connection_string
        floors["azurite_round_trip_ms"] = host_bench.azurite_round_trip_ms(
            emulator.connection_string
        )
        hosts["ours_azure"] = HostProcess(ROOT / "bench" / "app", "azure")
    for name, host in hosts.items():
        host.start()
        host_round(host, QUICK)  # warm: imports, statements, the first episodes
        contestants[name] = host_contestant(host, size)
    floors["loopback_http_ms"] = loopback_ms(hosts["ours_sqlite"])
    for journal in ("delete", "wal"):
        contestants[f"dbos_{journal}"] = dbos_contestant(python, journal, tmp, size)
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in contestants}
    names = list(contestants)
    try:
        for rep in range(reps):
            order = names[rep % len(names) :] + names[: rep % len(names)]
            for name in order:
                if name == "ours_azure" and rep >= args.azure_reps:
                    continue
                print(f"rep {rep + 1}/{reps}: {name} ...", flush=True)
                runs[name].append(contestants[name](rep))
                # Written as it goes: a run cut short still leaves what it measured.
                Path(args.out).write_text(json.dumps({"partial": runs, "floors": floors}, indent=2))
    finally:
        for host in hosts.values():
            host.kill()
    extra: dict[str, Any] = {}
    print("crash to resume ...", flush=True)
    extra["crash_to_resume"] = crash_to_resume(f"sqlite:{tmp / 'crash.db'}", {}, size["chain"])
    print("one agent round ...", flush=True)
    extra["agent_round_ms"] = agent_round_ms(tmp)
    if emulator is not None:
        emulator.stop()
    print("step cost as history grows ...", flush=True)
    extra["step_cost"] = asyncio.run(step_costs(size["lengths"], tmp))
    results = {
        "mode": "quick" if args.quick else "full",
        "reps": reps,
        "sizes": size,
        "floors": floors,
        "workloads": {name: _by_metric(values) for name, values in runs.items()},
        **extra,
        "seconds": time.monotonic() - began,
    }
    results["ratios"] = ratios(results["workloads"])
    Path(args.out).write_text(json.dumps(results, indent=2))
    report(results)
    return 0


def all_stores_run(args: argparse.Namespace, size: dict[str, Any], reps: int) -> int:
    from bench import all_stores

    stores = [s.strip() for s in args.stores.split(",") if s.strip()]
    unknown = sorted(set(stores) - {"sqlite", "postgres", "azure"})
    if unknown or not stores:
        raise SystemExit(f"--stores: unknown store(s) {unknown}: choose from sqlite,postgres,azure")
    if args.smoke:
        size, reps = {**QUICK, **all_stores.SMOKE}, 1
    python = None if args.no_dbos else bench_python()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    tmp = Path(tempfile.mkdtemp(prefix="bench-run-"))
    all_stores.run(
        stores,
        python,
        tmp,
        size,
        reps,
        Path(args.out),
        ROOT,
        host_round,
        dbos_workloads,
        loopback_ms,
        host_bench.sqlite_commit_ms,
    )
    return 0


async def step_costs(lengths: str, tmp: Path) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for steps in (int(n) for n in lengths.split(",")):
        _, by_mode = await replay_cost.one_length(steps, 7, tmp, list(replay_cost.MODES))
        out[str(steps)] = {mode: phases["total"] for mode, phases in by_mode.items()}
    return out


def _by_metric(values: list[dict[str, float]]) -> dict[str, dict[str, float]]:
    return {key: summary([v[key] for v in values]) for key in values[0]}


def ratios(workloads: dict[str, dict[str, dict[str, float]]]) -> dict[str, float]:
    out = {}
    for ours in ("ours_sqlite", "ours_sqlite_full", "ours_azure"):
        for dbos in ("dbos_delete", "dbos_wal"):
            if ours not in workloads:
                continue
            for key in ("chain_ms_per_step", "fan_out_s", "many_x5_s"):
                out[f"{ours}/{dbos}:{key}"] = (
                    workloads[ours][key]["median"] / workloads[dbos][key]["median"]
                )
    return out


def report(results: dict[str, Any]) -> None:
    print(f"\nmode {results['mode']}, {results['reps']} repetition(s), sizes {results['sizes']}")
    print("floors: " + ", ".join(f"{k} {v:.3f}" for k, v in results["floors"].items()))
    workloads = results["workloads"]
    keys = sorted({k for w in workloads.values() for k in w})
    print(f"\n{'workload':<20}" + "".join(f"{name:>24}" for name in workloads))
    for key in keys:
        cells = "".join(
            f"{w[key]['median']:>14.2f} (p99 {w[key]['p99']:>6.2f})" if key in w else f"{'-':>24}"
            for w in workloads.values()
        )
        print(f"{key:<20}{cells}")
    print("\nratios ours / DBOS (medians)")
    for key, value in results["ratios"].items():
        print(f"  {key:<55} {value:6.2f}")
    print(f"\ncrash to resume: {results['crash_to_resume']}")
    print(f"agent round: {results['agent_round_ms']:.1f} ms")
    print("step cost (ms) by history length: " + json.dumps(results["step_cost"]))
    print(f"\ntotal {results['seconds']:.0f} s")


if __name__ == "__main__":
    sys.exit(main())
