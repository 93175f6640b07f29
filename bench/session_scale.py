"""Benchmark one long session: is turn 1,000 as fast as turn 1?

One host process (SQLite or Azure Storage through an in-memory Azurite), the offline planner
as the model. One session receives ``--submissions`` sequential submissions through the
sessions API, each "calculate i * 2 and then remember ni: value i" (two tool rounds and the
answer). For every submission it records the time from acceptance to completion (the
submission's own ``accepted_at`` / ``finished_at``, written by the session entity, so the
client's polling does not count), and at each checkpoint (10, 100, 1,000, ... turns) it prints:

* the median per-submission time of the window since the previous checkpoint, and ms per
  round (3 rounds per submission);
* the same median for ``--control`` submissions of a **fresh** session, run right there on
  the same host and hub: the long session at turn N against a session at turn 1 under the
  same machine load and the same hub size. Equal medians mean the long session costs no
  more than a new one, whatever the machine or the hub are doing;
* the session entity's stored state size in bytes (the head: what every operation reads and
  the host writes) and the host's entity batch p50 (``/admin/host/metrics``);
* the host's steps per submission in the window (orchestration episodes, entity batches and
  activity runs: each one commit) and, on Azure, its storage requests per submission - the
  work a submission costs, independent of the machine's load;
* on Azure, the rows of the hub table and the median time of a query of one empty
  partition: Azurite evaluates every query against every row of the table it names, so that
  time shows what the hub's size alone adds to each of the host's partition queries;
* once ``2 * --window`` submissions are done, the median of the last ``--window`` submissions
  over the median of the first ``--window`` (``last/first``): the final figure as it stands
  at that checkpoint, so a run stopped early still prints it.

At the end: the median of the first and of the last ``--window`` submissions of the long
session and their ratio, and the fresh sessions' medians at the first and last checkpoint.

``--retention VALUE`` sets the app's history retention, ``AGENT_HISTORY_RETENTION``, for the
host: ``0`` purges each submission's orchestrations (turn, run, rounds, tool tasks) from the
turn of the next submission, after that one is final and handed over, so the purge is outside
every submission's measured span but shares the host with the following submissions; ``off``
purges nothing; a duration such as ``90s`` or ``7d`` purges what is older. Without it the host
runs the app's default. The header and the summary name the retention used.

Usage: ``python bench/session_scale.py [--store sqlite|azure] [--submissions 1000]
[--checkpoints 10,100,1000] [--control 5] [--poll 0.25] [--retention 0] [--times FILE]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import urllib.request
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.kernel_client import FINAL, kernel_env, submit
from durable_host.testing import HostProcess, wait_for
from kernel.session.retention import DEFAULT_RETENTION, SETTING, parse_retention

ROUNDS_PER_SUBMISSION = 3  # calculate, remember, answer


def three_ports() -> tuple[int, int, int]:
    """Free ports for Azurite's blob, queue and table services."""
    from durable_host.ops import azurite

    blob, queue, table = azurite.free_ports(3)
    return blob, queue, table


SESSION = "scale"
HUB = "SessionScale"
STEPS = ("episodes", "entity_batches", "activity_runs")  # the host's commits


def state_bytes(host: HostProcess, session: str) -> int:
    url = f"{host.base_url}/runtime/webhooks/durabletask/entities/session/{session}"
    with urllib.request.urlopen(url) as response:
        body = json.loads(response.read())
    return len(json.dumps(body, separators=(",", ":")))


def metrics(host: HostProcess) -> dict[str, Any]:
    return dict(json.loads(urllib.request.urlopen(host.base_url + "/admin/host/metrics").read()))


def seconds(start: str, end: str) -> float:
    parse = datetime.fromisoformat
    return (parse(end) - parse(start)).total_seconds()


def one_submission(host: HostProcess, session: str, i: int, poll: float) -> tuple[str, float]:
    """Submission ``i`` of ``session``: its id and its milliseconds from acceptance to completion.

    The time comes from the submission's own record, so ``poll`` (how often the client asks)
    only sets the idle gap before the next submission - and how much of the host's work is
    answering the client: every poll reads the session.
    """
    sub = submit(
        host, session, f"calculate {i} * 2 and then remember n{i}: value {i}", request_id=f"r{i}"
    )

    def final() -> dict[str, Any] | None:
        view = host.get(f"/api/sessions/{session}/submissions/{sub}").json() or {}
        return view if view.get("status") in FINAL else None

    view = wait_for(final, 300, f"submission {sub} to finish", interval=poll)
    assert view["status"] == "completed", view
    return sub, seconds(view["accepted_at"], view["finished_at"]) * 1000


class HubProbe:
    """The hub table as Azurite holds it: its row count and the time of one partition query."""

    def __init__(self, connection: str) -> None:
        from azure.data.tables import TableServiceClient

        service = TableServiceClient.from_connection_string(connection)
        self.table = service.get_table_client(f"{HUB}HostState")

    def rows(self) -> int:
        return sum(1 for _ in self.table.query_entities("RowKey ne ''", select=["RowKey"]))

    def partition_query_ms(self, repeat: int = 15) -> float:
        times = []
        for _ in range(repeat):
            started = time.perf_counter()
            list(self.table.query_entities("PartitionKey eq 'probe' and RowKey ge 'i'"))
            times.append((time.perf_counter() - started) * 1000)
        return statistics.median(times)


def drift(times: list[float], window: int) -> float:
    """Median of the last ``window`` submissions over that of the first; NaN until both fit."""
    if len(times) < 2 * window:
        return float("nan")
    return statistics.median(times[-window:]) / statistics.median(times[:window])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", choices=("sqlite", "azure"), default="sqlite")
    parser.add_argument("--submissions", type=int, default=1000)
    parser.add_argument("--checkpoints", default="10,100,1000")
    parser.add_argument("--window", type=int, default=50, help="first/last window size")
    parser.add_argument(
        "--control", type=int, default=5, help="fresh-session submissions per checkpoint (0: none)"
    )
    parser.add_argument("--poll", type=float, default=0.25, help="seconds between status reads")
    parser.add_argument(
        "--retention",
        help="the app's AGENT_HISTORY_RETENTION for the host (0, 90s, 7d, off; default: the "
        f"app's default, {DEFAULT_RETENTION})",
    )
    parser.add_argument("--times", type=Path, help="append each submission's ms to this file")
    args = parser.parse_args()
    checkpoints = sorted(
        {int(c) for c in args.checkpoints.split(",") if int(c) <= args.submissions}
    )
    tmp = Path(tempfile.mkdtemp(prefix="bench-session-"))
    env = kernel_env(tmp)
    if args.retention is not None:
        parse_retention(args.retention)  # refuse a bad value here, not in the host's log
        env[SETTING] = args.retention
    kept = args.retention if args.retention is not None else f"default ({DEFAULT_RETENTION})"
    emulator = None
    probe = None
    if args.store == "azure":
        from durable_host.ops import azurite

        emulator = azurite.start(None, three_ports(), in_memory=True, log=tmp / "azurite.log")
        env.update(AzureWebJobsStorage=emulator.connection_string, DURABLE_HOST_HUB=HUB)
        spec = "azure"
        probe = HubProbe(emulator.connection_string)
    else:
        spec = f"sqlite:{tmp / 'bench.db'}"
    host = HostProcess(ROOT, spec, env=env).start()
    times: list[float] = []
    controls: list[tuple[int, float]] = []
    header = (
        f"{'turns':>6} {'ms/submission':>14} {'ms/round':>9} {'fresh session':>14} "
        f"{'state bytes':>12} {'batch p50':>10} {'steps/sub':>10} {'last/first':>10}"
    )
    if probe is not None:
        header += f" {'requests/sub':>13} {'hub rows':>9} {'query ms':>9}"
    print(f"store {args.store}, history retention {kept}", flush=True)
    print(header, flush=True)
    try:
        started = time.perf_counter()
        last = 0
        before = metrics(host)
        for i in range(1, args.submissions + 1):
            _, ms = one_submission(host, SESSION, i, args.poll)
            times.append(ms)
            if args.times is not None:
                with args.times.open("a") as out:
                    out.write(f"{ms:.1f}\n")
            if i not in checkpoints:
                if i % 50 == 0:
                    print(
                        f"  ... {i} submissions, {time.perf_counter() - started:.0f} s", flush=True
                    )
                continue
            now = metrics(host)
            steps = sum(now.get(k, 0) - before.get(k, 0) for k in STEPS) / (i - last)
            trips = (now.get("store_round_trips", 0) - before.get("store_round_trips", 0)) / (
                i - last
            )
            window = statistics.median(times[last:i])
            fresh = float("nan")
            if args.control:
                session = f"fresh{i}"
                fresh = statistics.median(
                    one_submission(host, session, n, args.poll)[1]
                    for n in range(1, args.control + 1)
                )
                controls.append((i, fresh))
            line = (
                f"{i:>6} {window:>14.1f} {window / ROUNDS_PER_SUBMISSION:>9.1f} {fresh:>14.1f} "
                f"{state_bytes(host, SESSION):>12} "
                f"{float((now.get('entity_batch_ms') or {}).get('p50', 'nan')):>10.2f} "
                f"{steps:>10.1f} {drift(times, args.window):>10.2f}"
            )
            if probe is not None:
                line += f" {trips:>13.0f} {probe.rows():>9} {probe.partition_query_ms():>9.2f}"
            print(line, flush=True)
            last = i
            before = metrics(host)
        assert host.process is not None
        status = Path(f"/proc/{host.process.pid}/status").read_text()
        rss = int(status.split("VmHWM:")[1].split()[0]) / 1024
    finally:
        host.kill()
        if emulator is not None:
            emulator.stop()
    w = min(args.window, len(times) // 2) or 1
    first, last_ = statistics.median(times[:w]), statistics.median(times[-w:])
    print(
        f"\nstore {args.store}, history retention {kept}, {len(times)} submissions of one session; "
        f"host peak RSS {rss:.0f} MiB"
    )
    print(
        f"median of the first {w}: {first:.1f} ms, of the last {w}: {last_:.1f} ms, "
        f"ratio {last_ / first:.2f}"
    )
    if len(controls) >= 2:
        (n0, f0), (n1, f1) = controls[0], controls[-1]
        print(
            f"fresh session (median of {args.control}): at turn {n0} {f0:.1f} ms, "
            f"at turn {n1} {f1:.1f} ms; long session / fresh at turn {n1}: "
            f"{statistics.median(times[-w:]) / f1:.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
