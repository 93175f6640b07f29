"""The tools' declarations (``kernel/turn/tools.py``: ``concurrency``, ``failure``) against the
golden histories: a tool task applies them only when its input says ``declarations``, so the
recorded tasks (none says it) replay unchanged (``test_golden_histories``). This module shows
the gate from the other side, on the same recorded history: flagged, a tool under a failure
policy whose first try succeeds asks for exactly the recorded actions, while a tool under a
declared limit asks for the limiter first."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from durable_host.core import orchestration, wire
from durable_host.core import shim as shim_mod
from durable_host.core.history import EventType
from kernel.turn import tools
from tests.replay.record import app_version, corpus_dir
from tests.replay.test_golden_histories import HANDLES, check


def flagged(name: str, **changes: Any) -> dict[str, Any]:
    """The recorded ``tool_task.{name}`` history with its input changed (``declarations``...)."""
    recorded = json.loads((corpus_dir(app_version()) / f"tool_task.{name}.json").read_text())
    started = next(e for e in recorded["events"] if e["EventType"] == EventType.EXECUTION_STARTED)
    job = json.loads(json.loads(started["Input"]))
    started["Input"] = json.dumps(json.dumps({**job, **changes}))
    return recorded


def test_a_flagged_tool_under_a_failure_policy_replays_its_first_try_unchanged(
    tmp_path: Path,
) -> None:
    assert tools.TOOLS["write_document"].failure is not None
    path = tmp_path / "tool_task.write_document.json"
    path.write_text(json.dumps(flagged("write_document", declarations=True)))
    check(path)  # the same actions, the same output


def next_actions(recorded: dict[str, Any]) -> list[str]:
    """What today's code asks for after the recorded history ends."""
    events = recorded["events"]
    started = next(e for e in events if e["EventType"] == EventType.EXECUTION_STARTED)
    execution_id = started["OrchestrationInstance"]["ExecutionId"]
    request = wire.encode_orchestration_request(
        recorded["instance_id"], events, started.get("Input"), recorded["parent_instance_id"]
    )
    decided = wire.decode_orchestrator_state(HANDLES["tool_task"](request))
    view = orchestration.InstanceView(
        recorded["instance_id"], "Running", execution_id, events, "tool_task"
    )
    shim = shim_mod.Shim(view, events, events[-1]["Timestamp"], execution_id)
    shim.walk(decided.actions)
    return [shim_mod.describe_event(e) for e in shim.new_events]


def accepted(recorded: dict[str, Any]) -> dict[str, Any]:
    """The history cut where the call was accepted (its intent's commit answered), before
    the episode that ran it decided anything."""
    events = recorded["events"]
    cut = next(i for i, e in enumerate(events) if e["EventType"] == EventType.TASK_SCHEDULED)
    return {**recorded, "events": events[:cut]}


def test_a_flagged_tool_under_a_declared_limit_asks_for_the_limiter_first() -> None:
    assert tools.TOOLS["append_ledger"].concurrency is not None
    # A recorded task in flight, its call accepted, as if the call had been an append.
    append = {"id": "call_1_1_0", "name": "append_ledger", "arguments": {"text": "2+3"}}
    unflagged = next_actions(accepted(flagged("calculator", call=append)))
    assert len(unflagged) == 1 and "execute_tool" in unflagged[0]  # as it always ran
    limited = next_actions(accepted(flagged("calculator", call=append, declarations=True)))
    assert len(limited) == 1 and "acquire" in limited[0] and "tool-ledger" in limited[0]
