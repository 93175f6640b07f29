"""System calls per short orchestration: what the host asks of the kernel for one 5-step
chain, with short episodes on the event loop (the default) and with every episode in a
worker thread (``DURABLE_HOST_INLINE_EVENTS=0``).

For each variant: a host on a fresh SQLite file (``bench/app``), ``--warm`` chains run
first, then ``strace -f -c`` attached while ``--count`` chains are started one after the
other and awaited (one status query every 50 ms; the per-instance reads come after the
trace). Printed per orchestration: every call made at least once per
orchestration, and the total. ``futex`` counts threads waiting for each other (the GIL, a
worker's queue); ``sendto`` is mostly the event loop's self-pipe, one per result a thread
hands back to the loop. Counts, not times: they hardly move with the machine's load.

Needs ``strace`` (Debian: ``apt-get install strace``) and the right to trace a child.

Usage: ``python bench/syscalls.py [--count 100] [--warm 20]``
"""

from __future__ import annotations

import argparse
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.run import all_finished, completed, start_many
from durable_host.testing import HostProcess

VARIANTS = {"loop (default)": {}, "threads (INLINE_EVENTS=0)": {"DURABLE_HOST_INLINE_EVENTS": "0"}}


def per_orchestration(env: dict[str, str], count: int, warm: int) -> dict[str, float]:
    tmp = Path(tempfile.mkdtemp(prefix="bench-syscalls-"))
    host = HostProcess(ROOT / "bench" / "app", f"sqlite:{tmp / 'b.db'}", env=dict(env)).start()
    assert host.process is not None
    try:
        for instance in start_many(host, "chain", {"steps": 5}, warm, "warm-"):
            completed(host, instance)
        out = tmp / "strace.txt"
        tracer = subprocess.Popen(
            ["strace", "-f", "-c", "-o", str(out), "-p", str(host.process.pid)],
            stderr=subprocess.DEVNULL,
        )
        time.sleep(1)  # strace attaches to every thread before the work starts
        ids = start_many(host, "chain", {"steps": 5}, count, "run-")
        all_finished(host, "run-")
        tracer.send_signal(signal.SIGINT)
        tracer.wait(30)
        for instance in ids:
            completed(host, instance)
    finally:
        host.kill()
    calls: dict[str, float] = {}
    for line in out.read_text().splitlines():
        parts = line.split()
        if len(parts) >= 5 and parts[3].isdigit():
            calls[parts[-1]] = int(parts[3]) / count
    return calls


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--warm", type=int, default=20)
    args = parser.parse_args()
    if shutil.which("strace") is None:
        print("strace is not installed", file=sys.stderr)
        return 2
    results = {
        name: per_orchestration(env, args.count, args.warm) for name, env in VARIANTS.items()
    }
    names = sorted(
        {c for r in results.values() for c, n in r.items() if n >= 1 and c != "total"},
        key=lambda c: -max(r.get(c, 0) for r in results.values()),
    )
    print(f"system calls per 5-step orchestration ({args.count} orchestrations)")
    print(f"{'call':<16}" + "".join(f"{name:>28}" for name in results))
    for call in [*names, "total"]:
        print(f"{call:<16}" + "".join(f"{r.get(call, 0):>28.1f}" for r in results.values()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
