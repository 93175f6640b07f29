"""A turn end to end over HTTP on the durable host, with the offline planner: rounds and tools."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from kernel.common import ids
from kernel.turn import tools
from tests.app.turn_support import (
    custom_status,
    entries_of,
    run_id,
    start_turn_host,
    submit,
    view,
    wait_final,
)
from tests.harness import HostProcess, store_specs


@pytest.fixture(scope="module", params=store_specs())
def host(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[HostProcess]:
    tmp = tmp_path_factory.mktemp("rounds")
    host = start_turn_host(request, str(request.param), tmp, {})
    host.tmp = tmp  # type: ignore[attr-defined]
    yield host
    host.kill()


def tool_records(entries: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(e["kind"], e["data"]["name"]) for e in entries if e["role"] == "tool"]


def test_a_multi_round_turn_runs_each_tool_as_its_own_task_and_answers(host):
    sub = submit(
        host, "rounds", "calculate 2+3 and then remember plan: buy milk and then recall plan"
    )

    final = wait_final(host, "rounds", sub)

    assert final["status"] == "completed"
    assert final["answer"] == '2+3 = 5\nSaved note "plan".\nNote "plan": buy milk'
    state = view(host, "rounds")
    # intent before action: each call is accepted, completed and applied, in that order
    assert tool_records(state["entries"]) == [
        (kind, name)
        for name in ("calculator", "write_document", "read_document")
        for kind in ("tool_intent", "tool_outcome", "message")
    ]
    assert state["documents"][tools.note_document_id("plan")]["data"] == {
        "title": "plan",
        "text": "buy milk",
    }
    turn = state["tasks"][ids.turn_instance_id("rounds", sub)]
    rounds = [state["tasks"][t] for t in turn["children"]]
    assert [r["status"] for r in rounds] == ["completed"] * 4
    tool_tasks = [state["tasks"][ids.tool_task_id(sub, n, 0)] for n in (1, 2, 3)]
    assert [(t["status"], t["phase"], t["parent"]) for t in tool_tasks] == [
        ("completed", "applied", r["id"]) for r in rounds[:3]
    ]
    model_calls = [state["tasks"][ids.child_task_id(r["id"], "model")] for r in rounds]
    assert all("prompt" in m["reason"] and m["status"] == "completed" for m in model_calls)


def test_the_model_response_and_its_tool_tasks_are_one_commit(host):
    sub = submit(host, "one-commit", "calculate 6*7")
    wait_final(host, "one-commit", sub)

    state = view(host, "one-commit")

    assistant = next(e for e in state["entries"] if e["role"] == "assistant")
    task_id = ids.tool_task_id(sub, 1, 0)
    changes = host.get("/api/sessions/one-commit/changes?after=0").json()["changes"]
    record = next(c for c in changes if any(i.get("n") == assistant["n"] for i in c["items"]))
    assert {
        "type": "task",
        "id": task_id,
        "status": "pending",
        "phase": "call calculator",
    } in record["items"]
    assert assistant["data"]["usage"]["completion_tokens"] > 0
    assert assistant["data"]["tool_calls"][0]["name"] == "calculator"


def test_a_rejected_call_is_a_result_the_model_sees_and_an_unsafe_tool_runs_once(host):
    sub = submit(host, "errors", "calculate the meaning of life and then ledger: paid 5 EUR")

    final = wait_final(host, "errors", sub)

    assert final["status"] == "completed"
    assert final["answer"].startswith("calculator did not complete (invalid_arguments)")
    assert final["answer"].endswith("Recorded in the ledger: paid 5 EUR")
    assert (host.tmp / "tool-ledger.txt").read_text().splitlines() == ["paid 5 EUR"]
    rejected = view(host, "errors")["tasks"][ids.tool_task_id(sub, 1, 0)]
    assert (rejected["status"], rejected["phase"]) == ("failed", "rejected")
    intents = entries_of(host, "errors", "tool_intent")
    assert [(i["data"]["name"], i["data"]["policy"]) for i in intents] == [
        ("append_ledger", "unsafe")
    ]


def test_the_run_publishes_a_small_custom_status_and_its_rounds_are_orchestrations(host):
    sub = submit(host, "status", "what is 1+1")
    wait_final(host, "status", sub)

    run = custom_status(host, run_id("status", sub))
    first_round = host.status(f"{run_id('status', sub)}:round-1")

    assert run["phase"] == "answer" and len(json.dumps(run)) <= 1000
    assert first_round["runtimeStatus"] == "Completed"
    assert first_round["output"]["kind"] == "continue"


def test_a_tool_call_for_an_unknown_document_is_an_error_entry_not_a_crash(host):
    sub = submit(host, "missing", "recall nothing here")

    final = wait_final(host, "missing", sub)

    assert final["status"] == "completed"
    assert (
        final["answer"]
        == 'read_document did not complete (not_found): there is no note titled "nothing here"'
    )
