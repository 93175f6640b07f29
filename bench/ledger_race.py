"""Race campaign on the attempt ledger: many contested attempts, several processes, 0 double runs.

N attempt keys, P processes that reach each key together (a barrier per key). Every process
walks every key the way ``execute_tool`` does - read the record; absent: create it; expired:
take it over; otherwise leave it - and "runs" the attempt when its create or take-over
succeeded, then completes the record as its owner. Half the keys are fresh (the processes race
to create them), half were left by a dead owner with an expired lease (they race to take them
over).

On half the keys the processes also wait for each other between the read and the write: every
one of them has read the same record before any writes, the worst interleaving, so those keys
are contested however the scheduler runs the processes. On the other half the interleaving is
whatever the machine makes of it (on a busy machine one process may finish a key before another
reads it).

It reports how many keys were contested (two or more processes got as far as a create or a
take-over on them), how many ran, and how many ran twice - which must be 0 - and checks every
record afterwards (completed by the process that ran it; runs 1 for fresh keys, 2 for taken-over
ones).

Usage::

    python bench/ledger_race.py [--attempts 1000] [--processes 4] [--ledger blob|file]

``--ledger blob`` (the default) uses ``AzureWebJobsStorage`` when it is set, else starts an
in-memory Azurite from the project's npm package. The test suite runs a smaller campaign
(``tests/adapters/test_ledger_contract.py``).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from adapters.attempt_ledger import (
    AttemptLedger,
    BlobAttemptLedger,
    FileAttemptLedger,
    attempt_state,
)

LEASE_S = 60.0
DEAD_OWNER = "dead-owner"

# ("file", directory) or ("blob", connection string, container name)
LedgerSpec = tuple[str, ...]


def open_ledger(spec: LedgerSpec) -> AttemptLedger:
    if spec[0] == "file":
        return FileAttemptLedger(spec[1])
    from adapters import app_state

    return BlobAttemptLedger(app_state.container_client(spec[1], spec[2]))


def forced(index: int) -> bool:
    """Whether key ``index`` is raced with every read before any write (both fresh and expired)."""
    return index % 4 < 2


def _contend(spec: LedgerSpec, keys: list[str], barrier: Any, results: Any) -> None:
    """One process: walk ``keys`` as ``execute_tool`` does; report what it tried and ran."""
    ledger = open_ledger(spec)
    owner = f"p{os.getpid()}-{uuid.uuid4().hex[:6]}"
    tried: list[str] = []
    ran: list[str] = []
    for index, key in enumerate(keys):
        barrier.wait()  # every process reaches each key together
        record = ledger.read(key)
        state = attempt_state(record, ledger.now())
        if forced(index):
            barrier.wait()  # everyone has read before anyone writes
        if state == "absent":
            tried.append(key)
            won = ledger.create(key, owner, LEASE_S)
        elif state == "expired":
            assert record is not None
            tried.append(key)
            won = ledger.take_over(key, owner, LEASE_S, record.owner)
        else:
            won = False
        if won:
            ran.append(key)
            ledger.complete(key, {"ran_by": owner}, owner)
    results.put({"owner": owner, "tried": tried, "ran": ran})


@dataclass
class CampaignResult:
    attempts: int
    processes: int
    contested: int
    forced: int
    ran: int
    double_runs: int
    never_ran: int
    bad_records: int
    seconds: float

    def table(self) -> str:
        rows = [
            ("attempts", self.attempts),
            ("processes", self.processes),
            ("contested attempts", self.contested),
            ("of them read by all before any write", self.forced),
            ("attempts run", self.ran),
            ("double runs", self.double_runs),
            ("never run", self.never_ran),
            ("records not as expected", self.bad_records),
            ("seconds", f"{self.seconds:.1f}"),
        ]
        return "\n".join(f"| {name} | {value} |" for name, value in rows)


def campaign(spec: LedgerSpec, attempts: int, processes: int) -> CampaignResult:
    """Run the race (see the module docstring) and check every record afterwards."""
    ledger = open_ledger(spec)
    run = uuid.uuid4().hex[:8]
    keys = [f"{run}:race:{i}:1" for i in range(attempts)]
    expired = set(keys[1::2])
    for key in expired:  # a dead owner's record whose lease ran out long ago
        ledger.create(key, DEAD_OWNER, -1.0)
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(processes)
    results = context.Queue()
    workers = [
        context.Process(target=_contend, args=(spec, keys, barrier, results))
        for _ in range(processes)
    ]
    began = time.monotonic()
    for worker in workers:
        worker.start()
    reports = [results.get(timeout=600) for _ in workers]
    seconds = time.monotonic() - began
    for worker in workers:
        worker.join(timeout=30)
    tried = Counter(k for r in reports for k in r["tried"])
    ran = Counter(k for r in reports for k in r["ran"])
    runner = {k: r["owner"] for r in reports for k in r["ran"]}
    bad = 0
    for key in keys:
        record = ledger.read(key)
        expected_runs = 2 if key in expired else 1
        if (
            record is None
            or not record.completed
            or record.runs != expected_runs
            or record.result != {"ran_by": runner.get(key)}
        ):
            bad += 1
    return CampaignResult(
        attempts=attempts,
        processes=processes,
        contested=sum(1 for k in keys if tried[k] >= 2),
        forced=sum(1 for i, k in enumerate(keys) if forced(i) and tried[k] == processes),
        ran=len(ran),
        double_runs=sum(1 for k in keys if ran[k] > 1),
        never_ran=sum(1 for k in keys if ran[k] == 0),
        bad_records=bad,
        seconds=seconds,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--attempts", type=int, default=1000)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--ledger", choices=["blob", "file"], default="blob")
    args = parser.parse_args()
    emulator = None
    with tempfile.TemporaryDirectory() as tmp:
        if args.ledger == "file":
            spec: LedgerSpec = ("file", str(Path(tmp) / "ledger"))
        else:
            connection = os.environ.get("AzureWebJobsStorage", "").strip()
            if not connection:
                from durable_host.ops import azurite

                blob, queue, table = azurite.free_ports(3)
                emulator = azurite.start(None, (blob, queue, table), in_memory=True)
                connection = emulator.connection_string
            spec = ("blob", connection, f"race-{uuid.uuid4().hex[:12]}")
        try:
            print(
                f"racing {args.attempts} attempts across {args.processes} processes"
                f" on the {args.ledger} ledger ...",
                file=sys.stderr,
                flush=True,
            )
            result = campaign(spec, args.attempts, args.processes)
        finally:
            if emulator is not None:
                emulator.stop()
    print(f"| {args.ledger} ledger | |\n|---|---:|")
    print(result.table())
    print(json.dumps(result.__dict__), file=sys.stderr)
    return 0 if result.double_runs == result.never_ran == result.bad_records == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
