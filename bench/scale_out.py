"""Throughput of 1, 2 and 4 hosts sharing one Azure Storage task hub (in-memory Azurite).

The workload is I/O-bound: ``--instances`` chains of ``--steps`` activities that each wait
50 ms (``bench/scale_app``, 4 activity slots per host), started through every host in
turn. For each host count the run uses a fresh hub, starts the hosts, waits until they
hold every partition between them, starts the chains and waits for all to complete.
Printed per host count: wall time, activity steps/s, scaling efficiency (steps/s divided
by host count times the one-host steps/s) and storage requests per step (the sum of the
hosts' ``store_round_trips`` over the run, background rounds included, divided by steps).

Usage: ``python bench/scale_out.py [--hosts 1,2,4] [--instances 32] [--steps 10]``
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from durable_host.testing import HostProcess, wait_for

APP = ROOT / "bench" / "scale_app"


def held(host: HostProcess) -> int:
    response = host.get("/admin/host/status")
    return len(response.json()["partitions"]["held"]) if response.status == 200 else 0


def trips(host: HostProcess) -> int:
    return int(host.get("/admin/host/metrics").json().get("store_round_trips", 0))


def run(count: int, args: argparse.Namespace, tmp: Path) -> tuple[float, float, float]:
    env = {"DURABLE_HOST_HUB": "S" + uuid.uuid4().hex[:12]}
    hosts = [
        HostProcess(APP, "azure", env=env, log_path=tmp / f"h{count}-{n}.log") for n in range(count)
    ]
    try:
        for host in hosts:
            host.start(timeout=120)
        wait_for(
            lambda: all(held(h) for h in hosts) and sum(held(h) for h in hosts) == 4,
            120,
            "the hosts to share the partitions",
            interval=0.5,
        )
        before = sum(trips(h) for h in hosts)
        started = time.perf_counter()
        ids = [
            hosts[n % count].start_orchestration("io_chain", {"steps": args.steps})
            for n in range(args.instances)
        ]
        for n, instance_id in enumerate(ids):
            hosts[n % count].wait_for_status(instance_id, timeout=600)
        elapsed = time.perf_counter() - started
        after = sum(trips(h) for h in hosts)
    finally:
        for host in hosts:
            host.kill()
    steps = args.instances * args.steps
    return elapsed, steps / elapsed, (after - before) / steps


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hosts", default="1,2,4")
    parser.add_argument("--instances", type=int, default=32)
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    from durable_host import azurite

    blob, queue, table = azurite.free_ports(3)
    emulator = azurite.start(None, (blob, queue, table), in_memory=True, log=tmp / "azurite.log")
    os.environ["AzureWebJobsStorage"] = emulator.connection_string
    try:
        print(f"{args.instances} chains x {args.steps} activities of 50 ms, 4 slots per host")
        print("| hosts | wall s | steps/s | efficiency | storage requests/step |")
        print("|---|---|---|---|---|")
        base = None
        for count in [int(c) for c in args.hosts.split(",")]:
            elapsed, rate, per_step = run(count, args, tmp)
            base = base or rate / count
            print(
                f"| {count} | {elapsed:.1f} | {rate:.1f} | {rate / (count * base):.2f} |"
                f" {per_step:.2f} |",
                flush=True,
            )
    finally:
        emulator.stop()


if __name__ == "__main__":
    main()
