"""Where the host's event loop spends a workload's time: cProfile of a real host process.

Starts the host on SQLite (``bench/app``) under ``python -m cProfile``, warms it with a short
chain, runs one workload - ``chain``: ``--reps`` chains of ``--steps`` no-op activities, one
after the other; ``many``: ``--count`` chains of 5 started one after the other, as the 500 x 5
of ``bench/run.py`` - and stops it with SIGTERM (cProfile writes its file when the process
ends cleanly). cProfile sees the thread that runs the event loop only, which is the one that
matters: the store's writer and the activities' threads mostly wait (``docs/performance.md``).

It prints the loop's busy share (the callbacks the loop ran, the host's start-up left out,
against them plus the time it waited in ``epoll`` over the process's life: the waits before
the workload and between its chains included), then, per step (``chain``)
or per instance (``many``), the milliseconds and entries of the engine's main pieces, and
the functions with the most time of their own (importing left out). An entry is a call, or a coroutine's
resumption after an ``await`` (cProfile counts both). The profiler slows Python: read the
shares, not the milliseconds.

Usage: ``python bench/profile_host.py [--workload chain|many] [--steps 200] [--reps 10]
[--count 500] [--top 15]``
"""

from __future__ import annotations

import argparse
import os
import pstats
import signal
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.run import all_finished, completed, start_many
from durable_host.testing import HostProcess

POLL = ("~", "<method 'poll' of 'select.epoll' objects>")
LOOP = ("asyncio/events.py", "_run")  # Handle._run: every callback the loop runs
START = ("durable_host/host.py", "start")  # the host's start-up, left out of "busy"
# Start-up's own work outside ``Host.start`` (imports), left out of the own-time list.
IMPORTING = (
    "<built-in method builtins.compile>",
    "<built-in method marshal.loads>",
    "<built-in method builtins.exec>",
    "<built-in method builtins.__build_class__>",
    "<method 'set_default_verify_paths' of '_ssl._SSLContext' objects>",
)
# (label, file suffix, function): the engine's pieces, outermost first.
PIECES = (
    ("an episode (the worker)", "durable_host/engine/loops.py", "_worker"),
    ("  its decision", "durable_host/engine/episodes.py", "_decide"),
    ("    continued sessions (SDK)", "durable_host/core/sessions.py", "advance"),
    ("    full replays and their walks", "durable_host/core/orchestration.py", "_rebuild"),
    ("  its commit, handed off", "durable_host/store/sqlite/store.py", "commit_step"),
    ("an activity's run on the loop", "durable_host/engine/activity_runner.py", "_run"),
    ("HTTP requests", "aiohttp/web_protocol.py", "_handle_request"),
    ("the engine's clock", "durable_host/engine/loops.py", "utc_now"),
    ("waking a thread: SimpleQueue.put", "~", "<method 'put' of '_queue.SimpleQueue' objects>"),
    ("waking a thread: executor submit", "concurrent/futures/thread.py", "submit"),
)


def totals(stats: pstats.Stats, where: str, name: str) -> tuple[int, float, float]:
    """Entries, own and cumulative seconds of every function ``name`` in a file ending ``where``."""
    entries, own, cumulative = 0, 0.0, 0.0
    for (path, _line, function), row in stats.stats.items():  # type: ignore[attr-defined]
        if function == name and path.endswith(where):
            entries, own, cumulative = entries + row[1], own + row[2], cumulative + row[3]
    return entries, own, cumulative


def run_workload(host: HostProcess, args: argparse.Namespace) -> int:
    """Run the workload; the number of units (steps or instances) it is divided by."""
    completed(host, host.start_orchestration("chain", {"steps": 5}))  # warm
    if args.workload == "chain":
        for _ in range(args.reps):
            completed(host, host.start_orchestration("chain", {"steps": args.steps}))
        return args.reps * args.steps
    start_many(host, "chain", {"steps": 5}, args.count, "profile-")
    all_finished(host, "profile-")
    return args.count


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", choices=("chain", "many"), default="chain")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--count", type=int, default=500)
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-profile-"))
    out = tmp / "host.prof"
    python = tmp / "python"  # the host's interpreter, under cProfile
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m cProfile -o "{out}" "$@"\n')
    python.chmod(0o755)
    host = HostProcess(ROOT / "bench" / "app", f"sqlite:{tmp}/hub.db")
    host.python, host.log_path = str(python), tmp / "host.log"
    host.start(timeout=60)
    try:
        units = run_workload(host, args)
    finally:
        assert host.process is not None
        os.kill(host.process.pid, signal.SIGTERM)
        host.process.wait(timeout=120)
    stats = pstats.Stats(str(out))
    unit = "step" if args.workload == "chain" else "instance"
    _, waited, _ = totals(stats, *POLL)
    _, _, started = totals(stats, *START)
    busy = totals(stats, *LOOP)[2] - started
    print(f"{args.workload}: {units} {unit}s; the loop's thread, under cProfile")
    print(
        f"busy {busy:.2f} s (start-up's {started:.2f} s left out), waiting in epoll"
        f" {waited:.2f} s: {busy / (busy + waited):.0%} busy"
    )
    print(f"\n{'piece':<36}{'ms/' + unit:>14}{'entries/' + unit:>18}{'of busy':>9}")
    for label, where, name in PIECES:
        entries, _own, cumulative = totals(stats, where, name)
        print(
            f"{label:<36}{cumulative * 1000 / units:>14.3f}{entries / units:>18.2f}"
            f"{cumulative / busy:>9.1%}"
        )
    print(f"\nmost own time (ms/{unit}, of busy):")
    own = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])  # type: ignore[attr-defined]
    shown = 0
    for (path, line, function), row in own:
        if (path, function) == POLL or function in IMPORTING or path.startswith("<frozen"):
            continue
        place = f"{Path(path).name}:{line}" if path != "~" else "builtin"
        print(f"  {row[2] * 1000 / units:8.3f} {row[2] / busy:6.1%}  {function} ({place})")
        shown += 1
        if shown >= args.top:
            break
    return 0


if __name__ == "__main__":
    sys.exit(main())
