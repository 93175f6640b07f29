"""Memory of a host with 10,000 instances asleep on durable timers, against an idle host.

One host process (SQLite store) serves the bench app (bench/app). The table compares its resident set
size (``VmRSS`` from /proc) idle, right after 10,000 ``sleeper`` instances were started and
went to sleep on a one-hour timer, and - after a restart - a fresh process whose store holds
the 10,000 sleepers, beside a fresh process on an empty store. ``VmHWM`` is the peak.
The engine's own per-instance state is read from /admin/host/metrics: the ready queue and
the history cache must be empty once everyone sleeps.

Usage: ``python bench/sleepers_memory.py [--instances 10000] [--threads 8]``
"""

from __future__ import annotations

import argparse
import concurrent.futures
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from durable_host.testing import WEBHOOK, HostProcess, wait_for

APP = ROOT / "bench" / "app"


def memory_kib(host: HostProcess) -> dict[str, int]:
    assert host.process is not None
    values = {}
    for line in Path(f"/proc/{host.process.pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = int(rest.split()[0])
    return values


def settled(host: HostProcess, episodes: int) -> dict[str, Any]:
    metrics = host.get("/admin/host/metrics").json()
    return metrics if metrics["episodes"] >= episodes and metrics["ready"] == 0 else {}


def start_sleepers(host: HostProcess, count: int, threads: int) -> float:
    def start(i: int) -> int:
        body = {"seconds": 3600}
        return host.post(f"{WEBHOOK}/orchestrators/sleeper/sleeper-{i:05d}", body).status

    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        for done, status in enumerate(pool.map(start, range(count)), 1):
            assert status == 202, status
            if done % 1000 == 0:
                print(f"  {done} started", flush=True)
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--instances", type=int, default=10_000)
    parser.add_argument("--threads", type=int, default=8)
    args = parser.parse_args()
    rows: list[tuple[str, dict[str, int]]] = []
    with tempfile.TemporaryDirectory() as tmp:
        empty = HostProcess(APP, f"sqlite:{Path(tmp) / 'empty.db'}").start()
        time.sleep(1.0)
        rows.append(("fresh host, empty store", memory_kib(empty)))
        empty.stop()

        host = HostProcess(APP, f"sqlite:{Path(tmp) / 'sleepers.db'}").start()
        time.sleep(1.0)
        rows.append(("same host before the sleepers", memory_kib(host)))
        seconds = start_sleepers(host, args.instances, args.threads)
        metrics = wait_for(lambda: settled(host, args.instances), 600, "every sleeper asleep", 0.5)
        time.sleep(1.0)
        rows.append((f"same host, {args.instances} asleep", memory_kib(host)))
        host.stop()
        host.start()
        time.sleep(1.0)
        after_restart = host.get("/admin/host/metrics").json()
        rows.append((f"fresh host, {args.instances} asleep in its store", memory_kib(host)))
        host.stop()

    print(
        f"\nstarted {args.instances} sleepers in {seconds:.1f}s ({args.instances / seconds:.0f}/s)"
    )
    print(f"{'host':<44} {'RSS MiB':>8} {'peak MiB':>9}")
    for label, values in rows:
        print(f"{label:<44} {values['VmRSS'] / 1024:>8.1f} {values['VmHWM'] / 1024:>9.1f}")
    idle = rows[0][1]["VmRSS"]
    loaded = rows[3][1]["VmRSS"]
    print(
        f"\nfresh host with {args.instances} sleepers / fresh idle host: {loaded / idle:.2f}"
        f" ({(loaded - idle) * 1024 / args.instances:.0f} bytes per sleeping instance)"
    )
    burst = rows[2][1]["VmRSS"] - rows[1][1]["VmRSS"]
    print(f"growth of the host that took the burst: {burst / 1024:.1f} MiB (allocator high water)")
    cache = metrics.get("history_cache", {})
    print(
        f"engine state once asleep: ready={metrics['ready']}"
        f" running_activities={metrics['running_activities']}"
        f" history_cache_instances={cache.get('instances')} (after restart: ready={after_restart['ready']})"
    )


if __name__ == "__main__":
    main()
