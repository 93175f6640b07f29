"""Replay every recorded history through today's orchestrator code: in-flight turns must survive.

Each file in ``histories/`` is the raw history of one finished instance, recorded from a real
run on the durable host (``python -m tests.replay.record``; docs/testing.md). Replaying it
through the orchestrator's SDK handle must ask for exactly the actions the history already
holds - same ids, types and names, nothing new - and finish with the recorded output. A code
change that fails here would break instances that are running when it is deployed: keep the
old behaviour for them (a new orchestrator name or version), or re-record if none can be live.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from durable_host import orchestration, wire
from durable_host import shim as shim_mod
from durable_host.history import EventType
from orchestrators import agent_round, agent_run, tool_task

HISTORY_DIR = Path(__file__).resolve().parent / "histories"
HISTORIES = sorted(HISTORY_DIR.glob("*.json"))
HANDLES: dict[str, Callable[[str], str]] = {
    # The decorated function holds the SDK's handle: context JSON in, state JSON out.
    "agent_run": agent_run.agent_run._function._func,
    "agent_round": agent_round.agent_round._function._func,
    "tool_task": tool_task.tool_task._function._func,
}


def replay(recorded: dict[str, Any]) -> tuple[shim_mod.Shim, wire.OrchestratorState]:
    events = [e for e in recorded["events"] if e["EventType"] != EventType.EXECUTION_COMPLETED]
    started = next(e for e in events if e["EventType"] == EventType.EXECUTION_STARTED)
    execution_id = started["OrchestrationInstance"]["ExecutionId"]
    request = wire.encode_orchestration_request(
        recorded["instance_id"], events, started.get("Input"), recorded["parent_instance_id"]
    )
    decided = wire.decode_orchestrator_state(HANDLES[recorded["orchestrator"]](request))
    view = orchestration.InstanceView(
        recorded["instance_id"], "Running", execution_id, events, recorded["orchestrator"]
    )
    shim = shim_mod.Shim(view, events, events[-1]["Timestamp"], execution_id)
    assert shim.walk(decided.actions), "the replay waits for something the history never gave"
    return shim, decided


def test_every_orchestrator_of_the_turn_has_golden_histories():
    recorded = {json.loads(path.read_text())["orchestrator"] for path in HISTORIES}

    assert recorded == set(HANDLES)


@pytest.mark.parametrize("path", HISTORIES, ids=[p.stem for p in HISTORIES])
def test_a_recorded_history_replays_without_new_actions_to_the_same_output(path: Path):
    recorded = json.loads(path.read_text())

    shim, decided = replay(recorded)  # raises NonDeterminismError on a changed action

    assert shim.new_events == []
    assert decided.error is None and decided.is_done
    assert decided.output == recorded["output"]


def test_a_changed_orchestrator_is_caught():
    recorded = json.loads((HISTORY_DIR / "tool_task.calculator.json").read_text())
    for event in recorded["events"]:
        if event["EventType"] == EventType.TASK_SCHEDULED:
            event["Name"] = "execute_tool_v0"  # as if the code had called another activity

    with pytest.raises(orchestration.NonDeterminismError):
        replay(recorded)
