"""Where one step of a sequential chain goes, on each store, from the host's own timings.

For each store: a fresh host (``bench/app``), warmed with a short chain, then a chain of
``--steps`` no-op activities, repeated ``--reps`` times. Reported per step (medians over the
repetitions of each repetition's median):

* ``step``: the chain's time per step (its history's first to last timestamp / steps);
* the engine's phases (``/admin/host/metrics``, the p50 of the repetition): ``wake`` (an
  activity's result handed to the engine until its episode takes it: the ready queue and
  the worker), ``attempt`` (the attempt count: none when the last commit counted it),
  ``load`` (the record and the history: from memory when they are current), ``replay``
  (the decision), ``commit`` (the store's transaction);
* ``rest``: ``step`` minus those: the activity's dispatch to its thread, its run, the
  hand-back to the event loop, and the engine's own bookkeeping;
* ``host_cpu``: the host process's CPU time per step (user + system, ``/proc``): what the
  event loop and the host's threads spent; the step's wall time beyond it is spent waiting
  (for the database's answers, an fsync, the GIL, the other processes on the cores);
* ``round_trips`` (network stores): the store's requests per step (PostgreSQL: BEGIN,
  statements and COMMIT; Azure: HTTP requests), the bench's own status reads included;
* the floor of the store (one durable commit; an Azurite round trip) and ``step / floor``.

Usage: ``python bench/step_breakdown.py [--stores sqlite,postgres] [--steps 200] [--reps 5]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import host_bench
from bench.run import completed, span
from durable_host.testing import HostProcess

PHASES = ("wake", "attempt", "load", "replay", "commit")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one_store(host: HostProcess, steps: int, reps: int) -> dict[str, float]:
    """Medians over ``reps`` repetitions, each on a fresh host (the engine's timings are its
    own: their p50 is that chain's, after a short warming chain)."""
    rows: list[dict[str, float]] = []
    for _ in range(reps):
        host.start(timeout=60)
        try:
            assert host.process is not None
            completed(host, host.start_orchestration("chain", {"steps": 5}))  # warm
            before = host_bench.metrics(host)
            cpu = cpu_seconds(host.process.pid)
            instance = host.start_orchestration("chain", {"steps": steps})
            row = {"step": span(completed(host, instance)) * 1000 / steps}
            row["host_cpu"] = (cpu_seconds(host.process.pid) - cpu) * 1000 / steps
            after = host_bench.metrics(host)
        finally:
            host.kill()
        if after.get("store_round_trips") is not None:
            trips = after["store_round_trips"] - before["store_round_trips"]
            row["round_trips"] = trips / steps
        for phase in PHASES:
            row[phase] = (after.get(f"{phase}_ms") or {}).get("p50", 0.0)
        row["rest"] = row["step"] - sum(row[p] for p in PHASES)
        rows.append(row)
    return {k: statistics.median(r[k] for r in rows) for k in rows[0]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stores", default="sqlite,postgres")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-breakdown-"))
    server = emulator = None
    out: dict[str, dict[str, Any]] = {}
    try:
        for store in args.stores.split(","):
            env: dict[str, str] = {}
            floor: float
            if store == "sqlite":
                spec = f"sqlite:{tmp}/chain.db"
                floor = host_bench.sqlite_commit_ms(tmp / "floor.db")
            elif store == "postgres":
                from bench import all_stores, postgres_bench

                url, server = postgres_bench.server_url(tmp)
                spec = "postgres"
                env = {"DURABLE_HOST_POSTGRES": url, "DURABLE_HOST_HUB": "B" + uuid.uuid4().hex[:8]}
                floor = all_stores.postgres_commit_ms(url)
            else:
                from durable_host.ops import azurite

                blob, queue, table = azurite.free_ports(3)
                emulator = azurite.start(
                    None, (blob, queue, table), in_memory=True, log=tmp / "azurite.log"
                )
                os.environ["AzureWebJobsStorage"] = emulator.connection_string
                spec = "azure"
                floor = host_bench.azurite_round_trip_ms(emulator.connection_string)
            host = HostProcess(ROOT / "bench" / "app", spec, env=env)
            host.log_path = tmp / f"{store}.log"
            out[store] = {**one_store(host, args.steps, args.reps), "floor": floor}
            out[store]["step_per_floor"] = out[store]["step"] / floor
    finally:
        if server is not None:
            server.stop()
        if emulator is not None:
            emulator.stop()
    print(f"chain of {args.steps}, medians of {args.reps}; ms per step unless named")
    print(f"{'':<16}" + "".join(f"{s:>12}" for s in out))
    for key in dict.fromkeys(k for v in out.values() for k in v):
        print(f"{key:<16}" + "".join(f"{v.get(key, float('nan')):>12.3f}" for v in out.values()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
