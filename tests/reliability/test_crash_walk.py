"""Campaign 1: a crash point walked across every storage call of each durable feature.

For each scenario and kill point, run n = 1, 2, ...: a fresh host of the reliability app
(``walk_app/``) starts with ``DURABLE_HOST_FAULTS=point@n``, the test drives the scenario until the
host kills itself at the n-th pass, restarts it without faults, drives the scenario to its end
and checks the outcome against an oracle computed here: the exact output, every effect in the
ledger at least once, nothing unexpected, and at most one activity run again per kill (the
at-least-once window). The walk of a scenario ends at the first n that completes without
reaching the point. ``store.before_commit`` is passed by every write of both stores (start,
messages, episode and entity commits, activity claims and completions, attempt counts, purge);
the engine's after-commit points cover the window after a commit and before what follows it.

Quick (in the normal test command): one kill per scenario at ``store.before_commit``.
Long: every pass of every point::

    DURABLE_RELIABILITY_LONG=1 DURABLE_TEST_STORES=sqlite,azure \\
        python -m pytest -s tests/reliability/test_crash_walk.py
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.harness import WEBHOOK, store_specs
from tests.reliability.conftest import LONG
from tests.reliability.support import (
    HostDied,
    Ledger,
    Verdict,
    alive,
    call,
    check_effects,
    reliability_host,
    settled,
    start_once,
    status,
    wait_terminal,
)

pytestmark = pytest.mark.crash
MAX_PASSES = 200  # a walk longer than this means the scenario never stops passing the point


@dataclass(frozen=True)
class Scenario:
    name: str
    orchestrator: str
    body: Any
    output: Any
    effects: Callable[[str], set[str]] = lambda _: set()
    event: Any = None  # raised once as "go", again only if the host never answered 202
    purge: bool = False


SCENARIOS = [
    Scenario("start", "w_start", {"x": 1}, {"echo": {"x": 1}}),
    Scenario("activity", "w_steps", {"n": 3}, [10, 20, 30], lambda i: {f"{i}:{s}" for s in (1, 2, 3)}),
    Scenario("timer", "w_timer", {"seconds": 1}, 10, lambda i: {i}),
    Scenario("event", "w_event", None, 70, lambda i: {i}, event={"value": 7}),
    Scenario("entity", "w_entity", None, 12),
    Scenario("suborchestration", "w_parent", None, 41, lambda i: {f"{i}:child"}),
    Scenario("purge", "w_start", {"x": 2}, {"echo": {"x": 2}}, purge=True),
    Scenario(
        "continue_as_new", "w_can", {"generation": 0, "last": 2}, 2,
        lambda i: {f"{i}:gen{g}" for g in range(3)},
    ),
]  # fmt: skip
LONG_POINTS = (
    "store.before_commit",
    "episode.after_commit",
    "entity.after_commit",
    "activity.start",
    "step.before_commit",  # an activity's result held in memory, its episode decided
    "store.before_step_commit",  # inside the commit of a result and its episode
)
# Quick: one kill per scenario, at a pass that differs from scenario to scenario.
QUICK_PASS = {s.name: 2 + i % 4 for i, s in enumerate(SCENARIOS)}


@dataclass
class Drive:
    raised: bool = False
    purged: bool = False
    final: dict[str, Any] | None = None


@dataclass
class Run:
    scenario: str
    point: str
    n: int
    hit: bool
    verdict: Verdict = field(default_factory=Verdict)


def drive(host, scenario: Scenario, instance_id: str, state: Drive) -> None:
    start_once(host, scenario.orchestrator, instance_id, scenario.body)
    if scenario.event is not None and not state.raised:
        resp = call(
            host, "POST", f"{WEBHOOK}/instances/{instance_id}/raiseEvent/go", scenario.event
        )
        assert resp.status == 202, resp.body
        state.raised = True
    state.final = wait_terminal(host, instance_id)
    if scenario.purge and not state.purged:
        resp = call(host, "DELETE", f"{WEBHOOK}/instances/{instance_id}")
        assert resp.status in (200, 404), resp.body  # 404: purged before a lost answer
        state.purged = True


def judge(host, scenario: Scenario, instance_id: str, state: Drive, ledger: Ledger) -> Verdict:
    verdict = Verdict()
    final = state.final or {}
    if final.get("runtimeStatus") != "Completed" or final.get("output") != scenario.output:
        verdict.wrong.append(f"{instance_id}: {final.get('runtimeStatus')} {final.get('output')!r}")
    if scenario.purge and status(host, instance_id) is not None:
        verdict.wrong.append(f"{instance_id} still exists after its purge")
    check_effects(ledger.counts(), scenario.effects(instance_id), verdict)
    return verdict


def walk_once(request, kind: str, tmp: Path, scenario: Scenario, point: str, n: int) -> Run:
    label = f"{scenario.name}-{point.replace('.', '-')}-{n}"
    ledger = Ledger(tmp / f"{label}.ledger")
    host = reliability_host(request, kind, tmp, label, {"RELIABILITY_LEDGER": str(ledger.path)})
    instance_id = f"w-{label}"
    state = Drive()
    host.start(faults=f"{point}@{n}")
    try:
        try:
            drive(host, scenario, instance_id, state)
            # A pass after the end still counts as reached (the point after the last commit
            # comes after the status turned terminal): the host is watched until it settles.
            settled(host)
        except HostDied:
            pass
        hit = not alive(host)
        if hit:
            host.wait_exit(10)
            host.start()
            drive(host, scenario, instance_id, state)
        return Run(scenario.name, point, n, hit, judge(host, scenario, instance_id, state, ledger))
    finally:
        host.kill()


def walk(request, kind: str, tmp: Path, scenario: Scenario, point: str, passes) -> list[Run]:
    runs = []
    for n in passes:
        run = walk_once(request, kind, tmp, scenario, point, n)
        runs.append(run)
        if not run.hit:
            break
    return runs


def report(kind: str, runs: list[Run]) -> dict[str, Any]:
    kills = [r for r in runs if r.hit]
    summary = {
        "store": kind,
        "mode": "long" if LONG else "quick",
        "runs": len(runs),
        "kills": len(kills),
        "points": sorted({r.point for r in runs}),
        "passes_per_scenario": {
            s.name: max((r.n for r in kills if r.scenario == s.name), default=0) for s in SCENARIOS
        },
        "duplicates": sum(r.verdict.duplicates for r in runs),
        "lost": sum(len(r.verdict.lost) for r in runs),
        "wrong": sum(len(r.verdict.wrong) for r in runs),
    }
    print(f"\ncrash walk: {json.dumps(summary)}")
    out = os.environ.get("RELIABILITY_RESULTS")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / f"crash-walk-{kind}.json").write_text(json.dumps(summary, indent=1))
    return summary


@pytest.mark.timeout(7200 if LONG else 300)
@pytest.mark.parametrize("kind", store_specs())
def test_crash_walk(request: pytest.FixtureRequest, tmp_path: Path, kind: str) -> None:
    runs: list[Run] = []
    for scenario in SCENARIOS:
        if LONG:
            for point in LONG_POINTS:
                runs += walk(request, kind, tmp_path, scenario, point, range(1, MAX_PASSES + 1))
        else:
            point = "store.before_commit"
            runs += walk(request, kind, tmp_path, scenario, point, [QUICK_PASS[scenario.name]])
    summary = report(kind, runs)

    problems = [
        (r.scenario, r.point, r.n, r.verdict) for r in runs if r.verdict.lost or r.verdict.wrong
    ]
    assert not problems, problems
    assert summary["kills"] > 0
    # One kill re-runs at most the one activity that was running.
    assert all(r.verdict.duplicates <= (1 if r.hit else 0) for r in runs), runs
    if LONG:
        assert all(not runs_of[-1].hit for runs_of in _by_walk(runs)), "a walk hit MAX_PASSES"


def _by_walk(runs: list[Run]) -> list[list[Run]]:
    walks: dict[tuple[str, str], list[Run]] = {}
    for run in runs:
        walks.setdefault((run.scenario, run.point), []).append(run)
    return list(walks.values())
