"""Replay every recorded history through today's orchestrator code: in-flight turns must survive.

``histories/<version>/`` holds raw histories of finished instances of one app version (the
host.json ``defaultVersion`` they ran at; ``unversioned/``: from before versions existed),
recorded from real runs on the durable host (``python -m tests.replay.record``;
docs/testing.md). Every corpus is replayed through today's code, because a deploy of today's
code may meet running instances of any of those versions: replaying must ask for exactly the
actions the history already holds - same ids, types and names, nothing new, nothing left out -
and finish with the recorded output. A failure names the history, the event, what history
expected and what the code does now; keep the old behaviour for those instances (branch on
``context.version``, docs/versioning.md), or re-record if none can be live.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import azure.durable_functions as df
import pytest

from durable_host.core import orchestration, wire
from durable_host.core import shim as shim_mod
from durable_host.core.history import EventType
from durable_host.engine import replay_check
from orchestrators import (
    agent_round,
    agent_run,
    agent_turn,
    notices,
    skill_run,
    tool_task,
    workspace_commit,
)
from tests.replay.record import app_version, corpus_dir

HISTORY_DIR = Path(__file__).resolve().parent / "histories"
HISTORIES = sorted(HISTORY_DIR.glob("*/*.json"))
HANDLES: dict[str, Callable[[str], str]] = {
    # The decorated function holds the SDK's handle: context JSON in, state JSON out.
    "agent_turn": agent_turn.agent_turn._function._func,
    "agent_run": agent_run.agent_run._function._func,
    "agent_round": agent_round.agent_round._function._func,
    "tool_task": tool_task.tool_task._function._func,
    "send_notices": notices.send_notices._function._func,
    "send_notice": notices.send_notice._function._func,
    "skill_run": skill_run.skill_run._function._func,
    "workspace_commit": workspace_commit.workspace_commit._function._func,
}
RERECORD = (
    "If no instance of this version can still be running when the change ships, re-record"
    " (python -m tests.replay.record) and say so in the change; otherwise keep the old"
    " behaviour for it (docs/versioning.md)."
)


class GoldenMismatch(AssertionError):
    pass


def replay(
    recorded: dict[str, Any], handles: dict[str, Callable[[str], str]] | None = None
) -> tuple[shim_mod.Shim, wire.OrchestratorState]:
    """The recorded history through today's code, as ``replay-check`` replays a stored one
    (``durable_host.engine.replay_check.replay``: one code path for both)."""
    handle = (handles or HANDLES)[recorded["orchestrator"]]
    events = [e for e in recorded["events"] if e["EventType"] != EventType.EXECUTION_COMPLETED]
    replayed = replay_check.replay(
        handle, recorded["instance_id"], events, recorded["parent_instance_id"]
    )
    assert replayed.decided.raw_failure is None, replayed.decided.raw_failure
    assert replayed.resolved, "the replay waits for something the history never gave"
    shim, decided = replayed.shim, replayed.decided
    return shim, decided


def check(path: Path, handles: dict[str, Callable[[str], str]] | None = None) -> None:
    """Replay one recorded history; a ``GoldenMismatch`` names what differs."""
    recorded = json.loads(path.read_text())
    where = f"{path.parent.name}/{path.name} ({recorded['orchestrator']})"
    try:
        shim, decided = replay(recorded, handles)
    except shim_mod.NonDeterminismError as exc:
        raise GoldenMismatch(f"{where}: {exc}\n{RERECORD}") from None
    if shim.new_events:
        asked = ", ".join(shim_mod.describe_event(e) for e in shim.new_events)
        raise GoldenMismatch(f"{where}: the code now asks for more than history holds: {asked}")
    if decided.error is not None or not decided.is_done or decided.output != recorded["output"]:
        raise GoldenMismatch(
            f"{where}: the replay ends differently: error {decided.error!r}, done"
            f" {decided.is_done}, output {decided.output!r} (recorded {recorded['output']!r})"
        )


def test_the_current_version_has_golden_histories_of_every_orchestrator_of_the_app():
    current = corpus_dir(app_version())
    recorded = {json.loads(p.read_text())["orchestrator"] for p in current.glob("*.json")}

    assert recorded == set(HANDLES), (
        f"record the corpus of {current.name}: python -m tests.replay.record"
    )


def test_every_history_was_recorded_at_the_version_of_its_corpus():
    for path in HISTORIES:
        events = json.loads(path.read_text())["events"]
        started = next(e for e in events if e["EventType"] == EventType.EXECUTION_STARTED)
        assert corpus_dir(started.get("Version") or "") == path.parent, path


@pytest.mark.parametrize("path", HISTORIES, ids=[f"{p.parent.name}/{p.stem}" for p in HISTORIES])
def test_a_recorded_history_replays_without_new_actions_to_the_same_output(path: Path):
    check(path)


def test_a_changed_activity_name_is_caught():
    recorded = json.loads((corpus_dir(app_version()) / "tool_task.calculator.json").read_text())
    for event in recorded["events"]:
        if event["EventType"] == EventType.TASK_SCHEDULED:
            event["Name"] = "execute_tool_v0"  # as if the code had called another activity

    with pytest.raises(orchestration.NonDeterminismError):
        replay(recorded)


def test_an_incompatible_change_fails_the_golden_histories_naming_the_difference():
    original = HANDLES["tool_task"].orchestrator_function  # the app's generator function

    def changed(context: df.DurableOrchestrationContext):
        # A deliberately incompatible change: a new step before everything the task did.
        yield context.call_activity("audit_tool_call", context.instance_id)
        return (yield from original(context))

    handles = {**HANDLES, "tool_task": df.Orchestrator.create(changed)}
    path = corpus_dir(app_version()) / "tool_task.calculator.json"

    with pytest.raises(GoldenMismatch) as caught:
        check(path, handles)

    text = str(caught.value)
    assert "tool_task.calculator.json (tool_task)" in text
    assert "history event EventSent #0 (entity operation 'commit'" in text  # the event, expected
    assert "now schedules a call to activity 'audit_tool_call' with sequence id 0" in text  # actual
    assert "python -m tests.replay.record" in text
