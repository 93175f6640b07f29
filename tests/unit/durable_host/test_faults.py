"""One fault plan format for both effects: SIGKILL points and lost Azure responses."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from durable_host.ops import faults

ROOT = Path(__file__).resolve().parents[3]


class LostResponse(Exception):
    pass


def test_a_plan_names_the_passes_at_which_each_point_fires() -> None:
    plan = faults.parse(" commit@2, send ,commit@5,stage@1,")

    assert plan == {"commit": {2, 5}, "send": {1}, "stage": {1}}


def test_a_point_fires_only_at_its_planned_passes() -> None:
    plan = faults.FaultPlan("commit@2,commit@3")

    passes = [plan.due("commit") for _ in range(4)]

    assert passes == [0, 2, 3, 0]
    assert plan.due("send") == 0


def test_a_lost_response_raises_the_callers_error_at_its_planned_pass() -> None:
    plan = faults.FaultPlan("complete@2")
    plan.lose("complete", LostResponse)

    with pytest.raises(LostResponse, match="fault injection: response of complete lost"):
        plan.lose("complete", LostResponse)
    plan.lose("complete", LostResponse)


def test_each_store_can_own_its_own_plan() -> None:
    first, second = faults.FaultPlan("send@1"), faults.FaultPlan("")

    second.lose("send", LostResponse)

    with pytest.raises(LostResponse):
        first.lose("send", LostResponse)


def test_the_lost_response_plan_is_read_from_its_own_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(faults.AZURE_FAULTS, "stage@1")

    plan = faults.FaultPlan.from_env(faults.AZURE_FAULTS)

    with pytest.raises(LostResponse):
        plan.lose("stage", LostResponse)


def test_the_process_plan_kills_the_process_at_the_nth_pass() -> None:
    script = (
        "from durable_host import faults\n"
        "for _ in range(3):\n"
        "    faults.hit('x')\n"
        "    print('passed', flush=True)\n"
    )
    env = {**os.environ, faults.PROCESS_FAULTS: "x@2"}

    done = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )

    assert done.returncode == -signal.SIGKILL
    assert done.stdout.split("\n")[:-1] == ["passed"]
    assert "fault injection: SIGKILL at x@2" in done.stderr


def test_a_rate_fires_at_about_that_share_of_passes_and_replays_with_its_seed() -> None:
    first, second = faults.FaultPlan("tx.*%5", seed=7), faults.FaultPlan("tx.*%5", seed=7)

    fired = [first.due("tx.before") for _ in range(2000)]

    assert 40 <= sum(1 for n in fired if n) <= 160
    assert fired == [second.due("tx.before") for _ in range(2000)]
    assert first.due("other") == 0


def test_a_failure_point_raises_the_given_error() -> None:
    plan = faults.FaultPlan("commit_episode.before@2")
    plan.fail("commit_episode.before", LostResponse("full"))

    with pytest.raises(LostResponse, match="full"):
        plan.fail("commit_episode.before", LostResponse("full"))
