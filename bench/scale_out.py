"""Throughput of 1, 2 and 4 hosts sharing one task hub: Azure Storage (in-memory Azurite) or,
with ``--store postgres``, PostgreSQL (``DURABLE_HOST_POSTGRES`` when set, else a private
server started from Debian's binaries, as the tests start theirs).

The workload is I/O-bound: ``--instances`` chains of ``--steps`` activities that each wait
50 ms (``bench/scale_app``, 4 activity slots per host), started through every host in
turn. For each host count the run uses a fresh hub, starts the hosts, waits until they
hold every partition between them, starts the chains and waits for all to complete.
Printed per host count: wall time, activity steps/s, scaling efficiency (steps/s divided
by host count times the one-host steps/s) and storage requests per step (the sum of the
hosts' ``store_round_trips`` over the run, background rounds included, divided by steps).

With ``--restart``: one host runs a chain, is SIGKILLed and started again on the same
machine; printed: kill to the new process answering, kill to it holding every partition
(the dead holder's leases released at once, not waited out), kill to the chain's next
completed step.

With ``--death N``: N times, two hosts standing for two machines (``DURABLE_HOST_MACHINE_NAME``)
share a fresh hub with a chain in every partition; one is SIGKILLed and not replaced.
Printed per run and as p50/max: kill to the survivor holding every partition (it evicts
the dead host's partitions once its heartbeat was silent for ``DURABLE_HOST_SILENCE_SECONDS``)
and kill to the first new step of a chain in one of the dead host's partitions.

Usage: ``python bench/scale_out.py [--store azure|postgres] [--hosts 1,2,4] [--instances 32]
[--steps 10] [--restart] [--death N]``
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from durable_host.cluster.ownership import partition_of
from durable_host.core.history import EventType
from durable_host.store.azure import AzureStore
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
        HostProcess(APP, args.store, env=env, log_path=tmp / f"h{count}-{n}.log")
        for n in range(count)
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


def restart(tmp: Path, kind: str) -> None:
    env = {"DURABLE_HOST_HUB": "R" + uuid.uuid4().hex[:12]}
    first = HostProcess(APP, kind, env=env, log_path=tmp / "r0.log").start(timeout=120)
    second = HostProcess(APP, kind, env=env, log_path=tmp / "r1.log")
    try:
        wait_for(lambda: held(first) == 4, 60, "the host to hold every partition", interval=0.2)
        chain = first.start_orchestration("io_chain", {"steps": 200})
        wait_for(lambda: steps_done(first, chain) >= 5, 60, "the chain to run", interval=0.1)
        assert first.process is not None
        first.process.kill()
        first.process.wait(10)
        killed = time.perf_counter()
        done = steps_done_stored(kind, env["DURABLE_HOST_HUB"], chain)
        second.start(timeout=120)
        answering = time.perf_counter() - killed
        wait_for(lambda: held(second) == 4, 60, "the restart to hold every partition", 0.05)
        holding = time.perf_counter() - killed
        wait_for(lambda: steps_done(second, chain) > done, 60, "the chain to resume", 0.05)
        resumed = time.perf_counter() - killed
    finally:
        first.kill()
        second.kill()
    print(
        f"restart on the same machine: answering {answering:.1f}s, every partition held"
        f" {holding:.1f}s, the chain's next step {resumed:.1f}s after the kill"
    )


def death(tmp: Path, kind: str, run_number: int) -> tuple[float, float]:
    """One host of two (two machines) killed: kill to the survivor holding every
    partition, and to the first new step of a chain of the dead host's partitions."""
    hub = "D" + uuid.uuid4().hex[:12]
    hosts = [
        HostProcess(
            APP,
            kind,
            env={"DURABLE_HOST_HUB": hub, "DURABLE_HOST_MACHINE_NAME": f"machine-{name}"},
            log_path=tmp / f"d{run_number}{name}.log",
        )
        for name in "ab"
    ]
    try:
        for host in hosts:
            host.start(timeout=120)
        doomed, survivor = hosts
        wait_for(lambda: held(doomed) == 2 and held(survivor) == 2, 60, "a share each", 0.2)
        units = set(doomed.get("/admin/host/status").json()["partitions"]["held"])
        chains: list[str] = []
        n = 0
        while {partition_of(c, 4) for c in chains} != {0, 1, 2, 3}:
            instance_id = f"chain-{run_number}-{n}"
            n += 1
            if partition_of(instance_id, 4) not in {partition_of(c, 4) for c in chains}:
                survivor.post(
                    f"/runtime/webhooks/durabletask/orchestrators/io_chain/{instance_id}",
                    {"steps": 400},
                )
                chains.append(instance_id)
        theirs = [c for c in chains if partition_of(c, 4) in units]
        wait_for(lambda: all(steps_done(survivor, c) >= 3 for c in chains), 60, "chains", 0.1)
        assert doomed.process is not None
        doomed.process.kill()
        doomed.process.wait(10)
        killed = time.perf_counter()
        done = {c: steps_done(survivor, c) for c in theirs}
        holding = resumed = 0.0
        deadline = killed + 90
        while not (holding and resumed) and time.perf_counter() < deadline:
            now = time.perf_counter() - killed
            if not holding and held(survivor) == 4:
                holding = now
            if not resumed and any(steps_done(survivor, c) > done[c] for c in theirs):
                resumed = now
            time.sleep(0.05)
    finally:
        for host in hosts:
            host.kill()
    return holding, resumed


def steps_done(host: HostProcess, instance_id: str) -> int:
    status = host.status(instance_id, "?showHistory=true") or {}
    events = status.get("historyEvents") or []
    return sum(1 for e in events if e.get("EventType") == "TaskCompleted")


def steps_done_stored(kind: str, hub: str, instance_id: str) -> int:
    """Completed steps as stored (read without taking part in the hub)."""

    async def read() -> int:
        store: Any
        if kind == "postgres":
            from durable_host.store.postgres import PostgresStore, from_spec

            store = PostgresStore(from_spec("postgres", hub), read_only=True)
        else:
            store = AzureStore(os.environ["AzureWebJobsStorage"], hub, read_only=True)
        await store.open()
        try:
            history = await store.get_history(instance_id)
        finally:
            await store.close()
        return sum(1 for e in history if e.get("EventType") == EventType.TASK_COMPLETED)

    return asyncio.run(read())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hosts", default="1,2,4")
    parser.add_argument("--instances", type=int, default=32)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--restart", action="store_true")
    parser.add_argument("--death", type=int, default=0, metavar="N")
    parser.add_argument("--store", choices=("azure", "postgres"), default="azure")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    emulator: Any
    if args.store == "postgres":
        from bench.postgres_bench import server_url

        url, emulator = server_url(tmp)
        os.environ["DURABLE_HOST_POSTGRES"] = url
    else:
        from durable_host.ops import azurite

        blob, queue, table = azurite.free_ports(3)
        emulator = azurite.start(
            None, (blob, queue, table), in_memory=True, log=tmp / "azurite.log"
        )
        os.environ["AzureWebJobsStorage"] = emulator.connection_string
    try:
        if args.restart:
            restart(tmp, args.store)
            return
        if args.death:
            silence = os.environ.get("DURABLE_HOST_SILENCE_SECONDS") or "default"
            print(f"{args.store}: a host's death, silence {silence}")
            print("| run | every partition held s | first step of its chains s |")
            print("|---|---|---|")
            runs = [death(tmp, args.store, n) for n in range(args.death)]
            for n, (holding, resumed) in enumerate(runs):
                print(f"| {n + 1} | {holding:.1f} | {resumed:.1f} |", flush=True)
            for name, values in (("held", [r[0] for r in runs]), ("resumed", [r[1] for r in runs])):
                print(f"{name}: p50 {statistics.median(values):.1f}s, max {max(values):.1f}s")
            return
        print(
            f"{args.store}: {args.instances} chains x {args.steps} activities of 50 ms,"
            " 4 slots per host"
        )
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
        if emulator is not None:
            emulator.stop()


if __name__ == "__main__":
    main()
