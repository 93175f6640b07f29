"""Tools that need a person: approve, reject, time out; the approvals endpoint's contract."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kernel.common import ids
from kernel.turn import tools
from tests.app.turn_support import (
    custom_status,
    start_turn_host,
    submit,
    view,
    wait_final,
    wait_phase,
)
from tests.harness import HostProcess, store_specs

PLAN = "remember old plan: eggs and then delete document old plan and then recall old plan"


@pytest.fixture(scope="module", params=store_specs())
def host(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[HostProcess]:
    host = start_turn_host(request, str(request.param), tmp_path_factory.mktemp("approval"), {})
    yield host
    host.kill()


def approve(host: HostProcess, session: str, task_id: str, decision: str, request_id: str = "a1"):
    return host.post(
        f"/api/sessions/{session}/approvals/{task_id}",
        {"requestId": request_id, "decision": decision},
    )


def test_an_approved_tool_runs_and_a_repeated_decision_is_idempotent(host):
    sub = submit(host, "approve", PLAN)
    task_id = ids.tool_task_id(sub, 2, 0)
    waiting = wait_phase(host, task_id, "approval")

    first = approve(host, "approve", task_id, "approve")
    final = wait_final(host, "approve", sub)
    again = approve(host, "approve", task_id, "approve")
    other = approve(host, "approve", task_id, "reject", request_id="a2")

    assert waiting["event"] == f"approval:{task_id}"
    assert first.status == 202 and first.json()["duplicate"] is False
    assert again.status == 202 and again.json()["duplicate"] is True
    assert other.status == 409 and other.json()["error"] == "not_waiting"
    assert final["answer"].splitlines() == [
        'Saved note "old plan".',
        'Deleted document "old plan".',
        'read_document did not complete (not_found): there is no note titled "old plan"',
    ]
    assert custom_status(host, task_id)["approval"] == {"decision": "approve", "request_id": "a1"}
    note = view(host, "approve")["documents"][tools.note_document_id("old plan")]
    assert (note["version"], note["deleted"], note["data"]) == (2, True, None)  # a tombstone


def test_a_rejected_tool_does_not_run_and_the_model_is_told(host):
    sub = submit(host, "reject", PLAN)
    task_id = ids.tool_task_id(sub, 2, 0)
    wait_phase(host, task_id, "approval")

    assert approve(host, "reject", task_id, "reject").status == 202
    final = wait_final(host, "reject", sub)

    assert final["answer"].splitlines() == [
        'Saved note "old plan".',
        (
            "delete_document did not complete (rejected): "
            "the approval for delete_document was rejected"
        ),
        'Note "old plan": eggs',
    ]
    state = view(host, "reject")
    assert state["tasks"][task_id]["status"] == "cancelled"
    assert state["documents"][tools.note_document_id("old plan")]["version"] == 1


def test_the_approvals_endpoint_refuses_what_is_not_waiting_or_malformed(host):
    sub = submit(host, "refuse", "calculate 1+1")
    wait_final(host, "refuse", sub)
    task_id = ids.tool_task_id(sub, 1, 0)

    assert approve(host, "refuse", task_id, "approve").status == 409
    assert approve(host, "other-session", task_id, "approve").status == 404
    assert approve(host, "refuse", task_id, "maybe").json()["field"] == "decision"
    bad = host.post(f"/api/sessions/refuse/approvals/{task_id}", raw=b"{nope")
    assert (bad.status, bad.json()["error"]) == (400, "invalid_json")


@pytest.fixture(scope="module", params=store_specs())
def impatient_host(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[HostProcess]:
    tmp = tmp_path_factory.mktemp("impatient")
    host = start_turn_host(request, str(request.param), tmp, {"AGENT_APPROVAL_TIMEOUT_S": "0.5"})
    yield host
    host.kill()


def test_an_approval_that_never_comes_counts_as_rejected(impatient_host):
    sub = submit(impatient_host, "timeout", PLAN)

    final = wait_final(impatient_host, "timeout", sub)

    assert (
        "delete_document did not complete (rejected): the approval for delete_document timed out"
        in final["answer"]
    )
    task = view(impatient_host, "timeout")["tasks"][ids.tool_task_id(sub, 2, 0)]
    assert (task["status"], task["phase"]) == ("cancelled", "applied")
