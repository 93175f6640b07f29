"""Benchmark an agent round on the durable host: storage commits, time and history size.

One host process on a SQLite store or on Azure Storage (an in-memory Azurite it starts), the
offline planner as the model, one calculator tool per round. For turns of N tool rounds (plus
the answer round) it reports, per round:

* storage commits: episode commits + entity batches + activity completions, from the host's
  ``/admin/host/metrics`` counters before and after the turn;
* wall time per round (the turn's time from submit to final answer, divided by its rounds);
* the history: events and bytes of ``agent_run`` (the only orchestration that lives for the
  whole turn) and of all the turn's orchestrations together (turn, run, rounds, tool tasks),
  read from the store (SQLite: the ``history`` table; Azure: the hub table's history rows) -
  both grow linearly with N;
* the host's peak RSS.

Usage: ``python bench/agent_round.py [--store sqlite|azure] [--rounds 1,10,100]``

The cost per submission as a *session* grows (turn 10, 100, 1,000 of one session) is
``bench/session_scale.py``'s.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.kernel_client import kernel_env, run_id, submit, wait_final
from durable_host.testing import HostProcess


def counters(host: HostProcess) -> dict[str, int]:
    metrics = host.get("/admin/host/metrics").json()
    return {k: int(metrics.get(k, 0)) for k in ("episodes", "entity_batches", "activity_runs")}


HUB = "AgentRound"


def three_ports() -> tuple[int, int, int]:
    """Free ports for Azurite's blob, queue and table services."""
    from durable_host.ops import azurite

    blob, queue, table = azurite.free_ports(3)
    return blob, queue, table


# (events, bytes) of the stored history of every instance whose id starts with one of the prefixes
HistorySize = Callable[..., tuple[int, int]]


def sqlite_history(db: Path) -> HistorySize:
    def size(*prefixes: str) -> tuple[int, int]:
        where = " OR ".join("instance_id LIKE ?" for _ in prefixes)
        with sqlite3.connect(db) as conn:
            count, total = conn.execute(
                f"SELECT COUNT(*), COALESCE(SUM(LENGTH(event)), 0) FROM history WHERE {where}",
                [p.replace("%", "") + "%" for p in prefixes],
            ).fetchone()
        return int(count), int(total)

    return size


def azure_history(connection: str, hub: str) -> HistorySize:
    """History rows (``h...``) of the hub table: an event's text is inline (``E``) or, when too
    large for a property, in a blob (``EBlob``; counted, its bytes not)."""
    from azure.data.tables import TableServiceClient

    from durable_host.store.azure.codec import partition_key

    table = TableServiceClient.from_connection_string(connection).get_table_client(
        f"{hub}HostState"
    )

    def size(*prefixes: str) -> tuple[int, int]:
        count = total = 0
        for prefix in prefixes:
            low = partition_key(prefix)
            rows = table.query_entities(
                "PartitionKey ge @low and PartitionKey lt @high and RowKey ge 'h' and RowKey lt 'i'",
                parameters={"low": low, "high": low + "\uffff"},
                select=["E"],
            )
            for row in rows:
                count += 1
                total += len(str(row.get("E") or "").encode())
        return count, total

    return size


def peak_rss_mb(host: HostProcess) -> float:
    assert host.process is not None
    for line in Path(f"/proc/{host.process.pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def one_turn(
    host: HostProcess, history: Path | HistorySize, rounds: int, session: str
) -> dict[str, float]:
    """One turn of ``rounds`` tool rounds; ``history`` is the SQLite file or a size reader."""
    size = sqlite_history(history) if isinstance(history, Path) else history
    text = " and then ".join(f"calculate {n}+{n}" for n in range(1, rounds + 1))
    before = counters(host)
    started = time.perf_counter()
    sub = submit(host, session, text)
    final = wait_final(host, session, sub, timeout=600)
    elapsed = time.perf_counter() - started
    assert final["status"] == "completed", final
    after = counters(host)
    commits = sum(after[k] - before[k] for k in after)
    run = run_id(session, sub)
    run_events, run_bytes = size(run)  # the run's children are ``{run}:...``: not prefixes
    run_events -= size(run + ":")[0]
    run_bytes -= size(run + ":")[1]
    all_events, all_bytes = size(f"{session}:turn:{sub}", f"{sub}:")
    total_rounds = rounds + 1  # the answer is a round too
    return {
        "rounds": total_rounds,
        "commits_per_round": commits / total_rounds,
        "ms_per_round": elapsed * 1000 / total_rounds,
        "run_events": run_events,
        "run_kib": run_bytes / 1024,
        "all_events": all_events,
        "all_kib": all_bytes / 1024,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", choices=("sqlite", "azure"), default="sqlite")
    parser.add_argument(
        "--rounds", default="1,10,100", help="tool rounds per turn, comma-separated"
    )
    args = parser.parse_args()
    sizes = [int(n) for n in args.rounds.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        env = kernel_env(Path(tmp), {"AGENT_MAX_ROUNDS": str(max(sizes) + 2)})
        emulator: Any = None
        history: Path | HistorySize
        if args.store == "azure":
            from durable_host.ops import azurite

            emulator = azurite.start(
                None, three_ports(), in_memory=True, log=Path(tmp) / "azurite.log"
            )
            env.update(AzureWebJobsStorage=emulator.connection_string, DURABLE_HOST_HUB=HUB)
            history = azure_history(emulator.connection_string, HUB)
            spec = "azure"
        else:
            history = Path(tmp) / "bench.db"
            spec = f"sqlite:{history}"
        host = HostProcess(ROOT, spec, env=env).start()
        try:
            print("warming up ...", flush=True)
            one_turn(host, history, 1, "warmup")
            results = []
            for size in sizes:
                print(f"turn with {size} tool round(s) ...", flush=True)
                results.append(one_turn(host, history, size, f"bench{size}"))
            rss = peak_rss_mb(host)
        finally:
            host.kill()
            if emulator is not None:
                emulator.stop()
    print(f"\nstore {args.store}")
    print(
        f"{'rounds':>7} {'commits/round':>14} {'ms/round':>9} {'agent_run events':>17} "
        f"{'agent_run KiB':>14} {'turn events':>12} {'turn KiB':>9} {'events/round':>13}"
    )
    for r in results:
        print(
            f"{r['rounds']:>7.0f} {r['commits_per_round']:>14.1f} {r['ms_per_round']:>9.1f} "
            f"{r['run_events']:>17.0f} {r['run_kib']:>14.1f} {r['all_events']:>12.0f} "
            f"{r['all_kib']:>9.1f} {r['all_events'] / r['rounds']:>13.1f}"
        )
    print(f"\nhost peak RSS: {rss:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
