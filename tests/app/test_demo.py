"""The README's main job runs to the end: ``python -m demo --exit``."""

from __future__ import annotations

import subprocess
import sys

from tests.harness import ROOT


def test_demo_completes_sends_each_notice_once_and_runs_a_registered_skill(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "demo", "--exit", "--port", "0", "--state-dir", str(tmp_path)],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )

    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "submission completed" in result.stdout
    answer = result.stdout.split("submission completed:", 1)[1]
    assert "(17 + 25) * 2 = 84" in answer
    assert answer.count(": confirmed") == 5
    assert '"alice@example.com": 1' in result.stdout
    # The answer was streamed: the change stream showed it growing as a preview first.
    streamed = [line for line in result.stdout.splitlines() if " streaming " in line]
    assert streamed and streamed[0].split("streaming", 1)[1].strip().startswith("(17")
    # The workspace: a report file, and run_python computing over it into a file of its own.
    assert "Python printed: numbers in the report: [5, 5] total 10" in result.stdout
    assert "stats.txt: confirmation rate: 100%" in result.stdout
    # An MCP server's tool (the reference time server over stdio) answered through the turn.
    assert 'mcp__time__convert_time: { "source": {' in result.stdout
    assert '"datetime": "' in result.stdout.split("mcp__time__convert_time:", 1)[1]
    assert "T21:00:00+09:00" in result.stdout
    assert "skill onboard-customer v1 registered" in result.stdout
    assert "skill run completed on v1" in result.stdout
    assert "welcome ACME: 3 seats, fee 36" in result.stdout
    ledger = (tmp_path / "tool-ledger.txt").read_text().splitlines()
    assert ledger == ["account opened for ACME", "welcome ACME: 3 seats, fee 36"]
