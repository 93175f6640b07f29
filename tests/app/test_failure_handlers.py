"""Per-kind failure handlers end to end: retried -> handled -> needs attention, the handler
exactly once with the original input and the last failure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.harness import APPS, HostProcess, store_spec_for, store_specs


@pytest.fixture(params=store_specs())
def host(request: pytest.FixtureRequest, tmp_path: Path):
    process = HostProcess(
        APPS / "failures",
        store_spec_for(str(request.param), tmp_path),
        env={"FAILURES_APP_MARKS": str(tmp_path / "marks.txt")},
    )
    process.start()
    yield process
    process.kill()


def test_each_tier_is_reached_and_the_handler_runs_once(host: HostProcess, tmp_path: Path) -> None:
    cases = {
        "first": ({"fail_times": 0}, "ok", 1),
        "second": ({"fail_times": 1}, "retried", 2),
        "exhausted": ({"fail_times": 9}, "handled", 3),
        "hopeless": ({"fail_times": 9, "handler_fails": True}, "needs_attention", 3),
    }
    started = {
        name: host.start_orchestration("task", {"id": name, **job}, f"task-{name}")
        for name, (job, _, _) in cases.items()
    }
    for name, (job, tier, attempts) in cases.items():
        status = host.wait_for_status(started[name], timeout=60)
        output = status["output"]
        assert (output["tier"], output["attempts"]) == (tier, attempts), output
        assert status["customStatus"]["phase"] == tier
    marks = [json.loads(line) for line in (tmp_path / "marks.txt").read_text().splitlines()]
    handled = [m for m in marks if "handled" in m]
    assert sorted(m["handled"] for m in handled) == ["exhausted", "hopeless"]  # once each
    given = next(m["given"] for m in handled if m["handled"] == "exhausted")
    assert given["input"] == {"id": "exhausted", "fail_times": 9}
    assert given["kind"] == "charge" and given["attempts"] == 3
    assert "card declined (exhausted try 3)" in given["failure"]
    assert given["task_id"] == "task-exhausted"
    hopeless = host.status("task-hopeless")["output"]
    assert "refund service is down" in hopeless["handler"]["failure"]
