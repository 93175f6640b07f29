"""Benchmark ``export`` and ``import`` of a SQLite task hub: instances per second.

Builds a hub of N instances (default 10,000) mid-flight - each has a history of ten events
(started, two activities done, a timer set) and one durable timer waiting in its inbox, a
tenth of them an activity work item not yet run - then runs the two commands (the functions behind ``python -m durable_host export`` /
``import``, in this process: a fresh interpreter's start-up would swamp the numbers) and
prints, for each, the wall time, instances per second, the process's peak RSS so far (flat
as N grows: the file is streamed, one page of instances in memory at a time) and the file's
size.

The hub is built through the transfer's own SQLite writer (as an import would build it), so
building it does not take a host N episodes.

``--azure`` also imports the file into a hub on an in-memory Azurite (which the bench starts)
and exports it from there: Azurite's numbers, not a storage account's. ``--postgres`` does
the same with a hub on PostgreSQL: on the server ``DURABLE_HOST_POSTGRES`` names, else on a
private server the bench starts (Debian's ``postgresql`` binaries, as the tests use them).

Usage: ``python bench/transfer.py [--instances 10000] [--azure] [--postgres]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import sys
import tempfile
import time
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from durable_host.core import history as h
from durable_host.core.records import InstanceRecord
from durable_host.functions import config as config_mod
from durable_host.ops import azurite
from durable_host.transfer import commands
from durable_host.transfer.protocol import ActivityDump, InboxItem, InstanceDump, Item
from durable_host.transfer.sqlite import SqliteHub

APP = ROOT / "tests" / "apps" / "transfer"
AT = "2026-01-01T00:00:00.000000Z"
DUE = "2099-01-01T00:00:00.000000Z"


def instance(i: int) -> InstanceDump:
    instance_id = f"bench-{i:06d}"
    execution = f"e{i:06d}"
    started = h.execution_started(
        at=AT,
        name="napper",
        instance_id=instance_id,
        execution_id=execution,
        input_json=json.dumps({"n": i}),
        version=None,
    )
    events = [
        h.orchestrator_started(AT),
        started,
        h.task_scheduled(0, AT, "note", json.dumps(instance_id)),
        h.orchestrator_completed(AT),
        h.orchestrator_started(AT),
        h.task_completed(0, AT, json.dumps(f"noted {instance_id}")),
        h.task_scheduled(1, AT, "note", json.dumps(instance_id)),
        h.task_completed(1, AT, json.dumps(f"noted {instance_id}")),
        h.timer_created(2, AT, DUE),
        h.orchestrator_completed(AT),
    ]
    timer = {"kind": "event", "event": h.timer_fired(2, DUE, DUE), "execution_id": execution}
    record = InstanceRecord(
        instance_id, "napper", "Running", execution, None, json.dumps({"n": i}), None, None, AT, AT
    )
    return InstanceDump(
        record, [json.dumps(e) for e in events], [InboxItem(json.dumps(timer), DUE)]
    )


async def build(path: Path, count: int) -> None:
    def items() -> Iterator[Item]:
        for i in range(count):
            yield instance(i)
            if i % 10 == 0:
                yield ActivityDump(f"bench-{i:06d}", f"e{i:06d}", 3, "tick", '"x"', 0)

    hub = SqliteHub(path)
    await hub.open_quiet()
    try:
        await hub.write(items())
    finally:
        await hub.close()


def timed(call: Coroutine[Any, Any, int]) -> tuple[float, float]:
    """Wall time of one command run in this process, and the process's peak RSS since."""
    began = time.perf_counter()
    code = asyncio.run(call)
    elapsed = time.perf_counter() - began
    if code != 0:
        raise SystemExit(f"the command failed (exit {code})")
    return elapsed, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--instances", type=int, default=10_000)
    parser.add_argument("--azure", action="store_true", help="also into and out of Azurite")
    parser.add_argument("--postgres", action="store_true", help="also into and out of PostgreSQL")
    args = parser.parse_args()
    count, azure = args.instances, args.azure
    with tempfile.TemporaryDirectory() as tmp:
        source, target, file = Path(tmp, "a.db"), Path(tmp, "b.db"), Path(tmp, "hub.jsonl")
        asyncio.run(build(source, count))
        cfg = config_mod.load(APP)
        built = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"hub of {count} instances built (peak RSS so far {built:.0f} MiB)")
        seconds, rss = timed(commands.export_hub(cfg, f"sqlite:{source}", file, False))
        print(
            f"export: {count} instances in {seconds:.2f}s = {count / seconds:,.0f} instances/s,"
            f" peak RSS {rss:.0f} MiB, file {file.stat().st_size / 2**20:.1f} MiB"
        )
        seconds, rss = timed(commands.import_hub(cfg, f"sqlite:{target}", file))
        print(
            f"import: {count} instances in {seconds:.2f}s = {count / seconds:,.0f} instances/s,"
            f" peak RSS {rss:.0f} MiB (verify, then write in one transaction)"
        )
        if azure:
            run_azure(cfg, count, file, Path(tmp))
        if args.postgres:
            run_postgres(cfg, count, file, Path(tmp))


def run_azure(cfg: config_mod.HostConfig, count: int, file: Path, tmp: Path) -> None:
    """The same file into a hub on an in-memory Azurite, and exported from it again."""
    ports = azurite.free_ports(3)
    emulator = azurite.start(
        None, (ports[0], ports[1], ports[2]), in_memory=True, log=tmp / "azurite.log"
    )
    os.environ["AzureWebJobsStorage"] = emulator.connection_string
    os.environ["DURABLE_HOST_HUB"] = "BenchTransfer"
    try:
        seconds, rss = timed(commands.import_hub(cfg, "azure", file))
        print(
            f"import into Azure Storage (Azurite): {count} instances in {seconds:.2f}s ="
            f" {count / seconds:,.0f} instances/s, peak RSS {rss:.0f} MiB"
        )
        again = tmp / "from-azure.jsonl"
        seconds, rss = timed(commands.export_hub(cfg, "azure", again, False))
        print(
            f"export from Azure Storage (Azurite): {count} instances in {seconds:.2f}s ="
            f" {count / seconds:,.0f} instances/s, peak RSS {rss:.0f} MiB"
        )
    finally:
        emulator.stop()


def run_postgres(cfg: config_mod.HostConfig, count: int, file: Path, tmp: Path) -> None:
    """The same file into a new hub on PostgreSQL, and exported from it again."""
    server = None
    if not os.environ.get("DURABLE_HOST_POSTGRES"):
        from tests.postgres_server import PostgresServer, find_bindir

        bindir = find_bindir()
        if bindir is None:
            raise SystemExit("--postgres: set DURABLE_HOST_POSTGRES or install postgresql")
        server = PostgresServer(bindir).start()
        os.environ["DURABLE_HOST_POSTGRES"] = server.url
    os.environ["DURABLE_HOST_HUB"] = "BenchTransfer" + os.urandom(4).hex()
    try:
        seconds, rss = timed(commands.import_hub(cfg, "postgres", file))
        print(
            f"import into PostgreSQL: {count} instances in {seconds:.2f}s ="
            f" {count / seconds:,.0f} instances/s, peak RSS {rss:.0f} MiB (one transaction)"
        )
        again = tmp / "from-postgres.jsonl"
        seconds, rss = timed(commands.export_hub(cfg, "postgres", again, False))
        print(
            f"export from PostgreSQL: {count} instances in {seconds:.2f}s ="
            f" {count / seconds:,.0f} instances/s, peak RSS {rss:.0f} MiB"
        )
    finally:
        if server is not None:
            server.stop()
            del os.environ["DURABLE_HOST_POSTGRES"]


if __name__ == "__main__":
    main()
