"""``bench/profile_host.py`` runs a host under cProfile and prints its pieces: it cannot rot.

One tiny chain; the temporary folder is the test's own (``TMPDIR``). Nothing about time is
asserted: only that every piece is printed and that the counts follow from the workload (a
chain step is one decision and one activity run).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_profile_bench_prints_the_loops_pieces_per_step(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "profile_host.py"), "--steps", "10", "--reps", "2"],
        env={**os.environ, "TMPDIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("chain: 20 steps")
    rows = {
        line[:36].strip(): line[36:].split()
        for line in lines
        if line.startswith(" ") or line[:1].isalpha()
    }
    # A step is one decision and one activity (each a coroutine: about two entries).
    assert float(rows["its decision"][1]) >= 1.0
    assert 1.5 <= float(rows["an activity's run on the loop"][1]) <= 3.0
    assert "most own time (ms/step, of busy):" in lines
