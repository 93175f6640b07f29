"""The comparison workloads on DBOS Transact with its SQLite system database.

Run by ``bench/run.py`` with the bench environment's Python (``.venv-bench``, from
``requirements-bench.txt``); prints one JSON object: seconds per workload. The workloads
are the ones ``bench/app`` runs on the durable host, written the way DBOS documents them:
a no-op step, a workflow calling it N times in sequence, a fan-out through a queue with
DBOS's default settings (each enqueued call a child workflow, awaited by its handle), and many workflows started at once.

``--db postgresql://...`` runs DBOS on PostgreSQL instead (its own backend; DBOS creates
the database). ``--journal wal`` turns the database into write-ahead-log mode before DBOS opens it (the
mode is stored in the file); ``delete`` leaves SQLite's default rollback journal.

Usage: ``python bench/dbos_workloads.py --db PATH --journal wal|delete --chain 200
--fan-out 1000 --many 500x5``
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import time

from dbos import DBOS, DBOSConfig


@DBOS.step()
def noop(n: int) -> int:
    return n


@DBOS.workflow()
def chain(steps: int) -> int:
    for i in range(steps):
        noop(i)
    return steps


@DBOS.workflow()
def fan_out(count: int) -> int:
    queue = DBOS.retrieve_queue("fan_out")
    assert queue is not None
    handles = [queue.enqueue(noop, i) for i in range(count)]
    return len([handle.get_result() for handle in handles])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", required=True)
    parser.add_argument("--journal", choices=("wal", "delete"), default="delete")
    parser.add_argument("--chain", type=int, default=200)
    parser.add_argument("--fan-out", type=int, default=1000)
    parser.add_argument("--many", default="500x5")
    args = parser.parse_args()
    if args.db.startswith("postgresql://"):
        url = args.db  # DBOS's own PostgreSQL backend: it creates the database
    else:
        with sqlite3.connect(args.db) as db:
            db.execute(f"PRAGMA journal_mode={args.journal}")
        url = f"sqlite:///{args.db}"
    config: DBOSConfig = {"name": "bench", "system_database_url": url}
    DBOS(config=config)
    DBOS.launch()
    DBOS.register_queue("fan_out")  # DBOS's defaults
    results: dict[str, float] = {}
    chain(2)  # warm: the first workflow pays for imports and statements
    started = time.perf_counter()
    chain(args.chain)
    results["chain"] = time.perf_counter() - started
    started = time.perf_counter()
    fan_out(args.fan_out)
    results["fan_out"] = time.perf_counter() - started
    count, steps = (int(part) for part in args.many.split("x"))
    started = time.perf_counter()
    handles = [DBOS.start_workflow(chain, steps) for _ in range(count)]
    for handle in handles:
        handle.get_result()
    results["many"] = time.perf_counter() - started
    print(json.dumps(results), flush=True)
    DBOS.destroy()


if __name__ == "__main__":
    main()
