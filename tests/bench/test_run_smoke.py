"""``bench/run.py --stores ... --smoke`` runs and prints its table: the bench cannot rot.

Tiny sizes, one repetition, the tests' own PostgreSQL server, without DBOS (its environment
is the bench's, installed by ``bench/run.py`` on first use, not the tests'). No time is
asserted: figures live in ``bench/`` and ``docs/performance.md``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_all_stores_bench_runs_and_prints_its_table(tmp_path: Path, postgres_url: str) -> None:
    out = tmp_path / "results.json"
    env = {**os.environ, "TMPDIR": str(tmp_path), "DURABLE_HOST_POSTGRES": postgres_url}
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "run.py"),
            "--stores",
            "sqlite,postgres",
            "--smoke",
            "--no-dbos",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    for line in ("floors (ms): sqlite_commit_ms", "chain_ms_per_step", "many_x5_s"):
        assert line in done.stdout, done.stdout
    results = json.loads(out.read_text())
    assert {"ours_sqlite", "ours_postgres"} <= set(results["workloads"])
    assert results["workloads"]["ours_postgres"]["chain_requests_per_step"]["median"] > 0


def test_an_unknown_store_is_refused_by_name(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "run.py"), "--stores", "sqlite,mongo"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode != 0
    assert "unknown store(s) ['mongo']" in done.stderr
