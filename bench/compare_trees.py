"""The host's workloads on two checkouts, interleaved: a before/after check of a change.

``bench/run.py`` measures one checkout against DBOS; a change that should not alter speed
(a refactor) is better judged by running the same workloads on the checkout before it and
the one after it, alternately, on the same machine at the same time. This runs
``run.host_round`` (chain, fan-out, M x 5, external event, timer, entity calls; full sizes,
after a warm-up round) on a fresh host on SQLite (default configuration), in a new process
per repetition, in the order A B B A A B ... so that a drift of the machine's load over the
run weighs on both sides alike. Each checkout runs its own ``bench/`` and ``durable_host/``.

Usage: ``python bench/compare_trees.py BEFORE_DIR AFTER_DIR [--reps 3] [--out FILE]
[--store postgres]`` (``--store postgres``: both sides' hosts on one PostgreSQL server)
(``git worktree add`` or ``git archive`` gives a checkout of the commit before). Prints
medians per side and the ratios after / before; writes every run to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

# One repetition in the checkout it is run in (its working directory): one JSON line.
ONE_ROUND = """
import json, os, shutil, sys, tempfile, uuid
from pathlib import Path
sys.path.insert(0, str(Path.cwd()))
from bench import run
from durable_host.testing import HostProcess
tmp = Path(tempfile.mkdtemp(prefix="compare-trees-"))
if os.environ.get("DURABLE_HOST_POSTGRES"):  # --store postgres: a hub of its own
    hub = {"DURABLE_HOST_HUB": "Cmp" + uuid.uuid4().hex[:8]}
    host = HostProcess(run.ROOT / "bench" / "app", "postgres", env=hub)
    host.log_path = tmp / "host.log"
else:
    host = HostProcess(run.ROOT / "bench" / "app", f"sqlite:{tmp / 'hub'}.db", env={})
try:
    host.start()
    run.host_round(host, run.QUICK)
    out = run.host_round(host, run.FULL)
finally:
    host.kill()
    shutil.rmtree(tmp, ignore_errors=True)
print(json.dumps(out))
"""


def one_round(tree: Path, timeout: float, env: dict[str, str] | None = None) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-c", ONE_ROUND],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=True,
    )
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def order(reps: int) -> list[str]:
    """A B B A A B ...: each pair swaps, so neither side always runs first."""
    pairs = [("before", "after") if n % 2 == 0 else ("after", "before") for n in range(reps)]
    return [side for pair in pairs for side in pair]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--reps", type=int, default=3, help="repetitions per side")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per repetition")
    parser.add_argument("--out", type=Path, default=Path("compare-trees.json"))
    parser.add_argument(
        "--store",
        choices=("sqlite", "postgres"),
        default="sqlite",
        help="postgres: both on one PostgreSQL server (DURABLE_HOST_POSTGRES, else a private"
        " one started here), a hub of its own per repetition",
    )
    args = parser.parse_args()
    trees = {"before": args.before.resolve(), "after": args.after.resolve()}
    runs: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    env, server = None, None
    if args.store == "postgres":
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from bench import postgres_bench

        url, server = postgres_bench.server_url(Path(tempfile.mkdtemp(prefix="compare-trees-")))
        env = {**os.environ, "DURABLE_HOST_POSTGRES": url}
    try:
        for side in order(args.reps):
            print(f"{side} ({len(runs[side]) + 1}/{args.reps}) ...", flush=True)
            runs[side].append(one_round(trees[side], args.timeout, env))
            args.out.write_text(json.dumps(runs, indent=2))  # a run cut short keeps its rounds
    finally:
        if server is not None:
            server.stop()
    medians: dict[str, dict[str, float]] = {
        side: {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
        for side, rounds in runs.items()
    }
    print(f"\n{'workload':<22}{'before':>12}{'after':>12}{'after/before':>14}")
    for key in medians["before"]:
        before, after = medians["before"][key], medians["after"][key]
        ratio: Any = f"{after / before:.2f}" if before else "-"
        print(f"{key:<22}{before:>12.2f}{after:>12.2f}{ratio:>14}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
