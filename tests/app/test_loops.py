"""Agent loops end to end: a cron-driven prompt submitted as ordinary submissions, each
occurrence once by its request id; pause, resume and delete; a run uses only the loop's
declared tools, under its policy; a submission that keeps failing is retried, then the
operator is told once and the loop goes on; bad declarations refused.

The loop runs every two seconds so the test sees two occurrences in a few seconds; every
wait is bounded and nothing asserts on durations.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kernel.common import ids
from tests.app.test_notices_workflow import mailbox_call
from tests.app.test_sessions_api import final, submit, view
from tests.harness import HostProcess, wait_for

SESSION = "looping"


def loops_of(host: HostProcess, session: str = SESSION) -> dict[str, dict[str, Any]]:
    resp = host.get(f"/api/sessions/{session}/loops")
    assert resp.status == 200, resp.body
    return {loop["loopId"]: loop for loop in resp.json()["loops"]}


def in_state(
    host: HostProcess, loop_id: str, state: str, runs: int = 0, session: str = SESSION
) -> dict[str, Any] | None:
    loop = loops_of(host, session).get(loop_id)
    return loop if loop and loop["state"] == state and loop["runs"] >= runs else None


def test_a_loop_submits_each_occurrence_once_and_obeys_pause_resume_delete(
    kernel_host: HostProcess,
) -> None:
    declaration = {"loopId": "digest", "schedule": "*/2 * * * * *", "prompt": "daily digest"}
    resp = kernel_host.post(f"/api/sessions/{SESSION}/loops", declaration)
    assert resp.status == 202, resp.body
    again = kernel_host.post(f"/api/sessions/{SESSION}/loops", declaration)
    assert again.status in (200, 202) and (again.status == 202 or again.json()["duplicate"])
    other = kernel_host.post(f"/api/sessions/{SESSION}/loops", {**declaration, "prompt": "x"})
    assert other.status == 409 and other.json()["error"] == "loop_exists"

    loop = wait_for(lambda: in_state(kernel_host, "digest", "sleeping", runs=2), 40, "two runs")
    last = loop["lastSubmission"]
    assert last["ok"] and last["request_id"].startswith("loop:digest:")
    # A doubled occurrence (the same request id again) is the same submission.
    dup = submit(kernel_host, SESSION, last["request_id"], "daily digest").json()
    assert dup["duplicate"] is True and dup["submissionId"] == last["submission_id"]
    assert final(kernel_host, SESSION, last["submission_id"])["status"] == "completed"
    # The runs are ordinary submissions of the session, each with its occurrence's request id.
    held = view(kernel_host, SESSION)["submissions"]
    assert held[last["submission_id"]]["request_id"] == last["request_id"]
    loop_runs = [s for s in held.values() if s["request_id"].startswith("loop:digest:")]
    assert len(loop_runs) >= 2
    assert len({s["request_id"] for s in loop_runs}) == len(loop_runs)

    assert kernel_host.post(f"/api/sessions/{SESSION}/loops/digest/pause").status == 202
    paused = wait_for(lambda: in_state(kernel_host, "digest", "paused"), 60, "paused")
    assert paused["next"] is None
    assert kernel_host.post(f"/api/sessions/{SESSION}/loops/digest/resume").status == 202
    wait_for(lambda: in_state(kernel_host, "digest", "sleeping", paused["runs"] + 1), 30, "resumed")
    assert kernel_host.request("DELETE", f"/api/sessions/{SESSION}/loops/digest").status == 202
    kernel_host.wait_for_status(ids.validate_instance_id("loop:looping:digest"))
    assert loops_of(kernel_host)["digest"]["state"] == "deleted"
    assert kernel_host.post(f"/api/sessions/{SESSION}/loops/digest/pause").status == 404


def test_a_loop_run_calls_only_the_loops_tools_under_its_policy(kernel_host: HostProcess) -> None:
    session = "looping-narrow"
    declaration = {
        "loopId": "narrow",
        "schedule": "*/2 * * * * *",
        # three tool rounds: allowed, not allowed, and one the policy leaves no round for
        "prompt": "calculate 2+3 and then ledger: from a loop and then calculate 1+1",
        "tools": ["calculator"],
        "policy": {"max_rounds": 3},
    }
    assert kernel_host.post(f"/api/sessions/{session}/loops", declaration).status == 202
    loop = wait_for(lambda: in_state(kernel_host, "narrow", "sleeping", 1, session), 40, "a run")
    assert kernel_host.request("DELETE", f"/api/sessions/{session}/loops/narrow").status == 202
    assert loop["loop"]["tools"] == ["calculator"] and loop["loop"]["policy"] == {"max_rounds": 3}
    sub_id = loop["lastSubmission"]["submission_id"]
    assert final(kernel_host, session, sub_id, timeout=40)["status"] == "failed"
    state = view(kernel_host, session)
    # The policy's max_rounds (3, not the app's 8) stopped the third round's tool call.
    reason = state["tasks"][f"{session}:turn:{sub_id}"]["reason"]
    assert reason.startswith("max_rounds") and "at most 3" in reason, reason
    results = {
        e["data"]["name"]: e["data"]["result"]
        for e in state["entries"]
        if e["submission_id"] == sub_id and e["role"] == "tool" and e["kind"] == "message"
    }
    assert results["calculator"]["ok"] and results["calculator"]["value"] == 5
    assert results["append_ledger"]["kind"] == "tool_not_allowed"  # refused, never run
    ledger = Path(kernel_host.env["AGENT_TOOL_LEDGER_FILE"])
    assert "from a loop" not in (ledger.read_text() if ledger.exists() else "")


def test_a_failing_occurrence_is_retried_then_handled_once_and_the_loop_goes_on(
    fresh_kernel_host, mailbox: str
) -> None:
    """``loop_submit`` raises on its first 4 runs: the first occurrence gives up after three
    tries (the operator is mailed once), the next one succeeds on its second try."""
    host = fresh_kernel_host(
        {
            "AGENT_MAIL_BASE_URL": mailbox,
            "AGENT_OPERATOR_EMAIL": "ops@example.com",
            "KERNEL_FAULTS": "loop.submit@4",
        }
    ).start()
    session = "looping-flaky"
    declaration = {"loopId": "flaky", "schedule": "*/2 * * * * *", "prompt": "hello"}
    assert host.post(f"/api/sessions/{session}/loops", declaration).status == 202
    first = wait_for(lambda: in_state(host, "flaky", "sleeping", 1, session), 60, "a run")
    given_up = first["lastSubmission"]
    assert (given_up["ok"], given_up["tier"], given_up["attempts"]) == (False, "handled", 3)
    second = wait_for(lambda: in_state(host, "flaky", "sleeping", 2, session), 60, "2 runs")
    assert host.request("DELETE", f"/api/sessions/{session}/loops/flaky").status == 202
    assert (second["lastSubmission"]["ok"], second["lastSubmission"]["tier"]) == (True, "retried")
    occurrence = given_up["request_id"].removeprefix("loop:flaky:")
    handler = host.status(f"loop:{session}:flaky:{occurrence}:on-failure", "?showInput=true")
    assert handler is not None and handler["runtimeStatus"] == "Completed"
    given = handler["input"]
    given = json.loads(given) if isinstance(given, str) else given
    assert given["attempts"] == 3 and "injected failure 3 of 4" in given["failure"]
    assert given["input"] == {
        "session_id": session,
        "request_id": given_up["request_id"],
        "prompt": "hello",
    }
    mails = [
        m for m in mailbox_call(mailbox, "/messages")["messages"] if m["to"] == "ops@example.com"
    ]
    assert len(mails) == 1 and occurrence in mails[0]["body"]


def test_a_bad_loop_declaration_names_its_field(kernel_host: HostProcess) -> None:
    base = {"loopId": "bad", "schedule": "0 0 9 * * *", "prompt": "p"}
    for change, field in (
        ({"schedule": "61 * * * * *"}, "schedule"),
        ({"schedule": "0 0 0 30 2 *"}, "schedule"),
        ({"timeZone": "Mars/Base"}, "timeZone"),
        ({"prompt": ""}, "prompt"),
        ({"loopId": "a b"}, "loopId"),
        ({"extra": 1}, "extra"),
        ({"tools": ["calculator", "nope"]}, "tools[1]"),
        ({"tools": ["calculator", "calculator"]}, "tools[1]"),
        ({"tools": "calculator"}, "tools"),
        ({"policy": {"max_rounds": 0}}, "policy.max_rounds"),
        ({"policy": {"max_concurrent_model_calls": 99}}, "policy.max_concurrent_model_calls"),
        ({"policy": {"rounds": 3}}, "policy.rounds"),
        ({"policy": [1]}, "policy"),
    ):
        resp = kernel_host.post(f"/api/sessions/{SESSION}/loops", {**base, **change})
        assert resp.status == 400, (change, resp.body)
        assert resp.json()["field"] == field, resp.body
    assert "bad" not in loops_of(kernel_host)


def test_loops_declared_by_setting_start_with_the_app(fresh_kernel_host) -> None:
    configured = [
        {"sessionId": "configured", "loopId": "nightly", "schedule": "0 0 2 * * *", "prompt": "p"},
        {"sessionId": "configured", "loopId": "broken", "schedule": "nope", "prompt": "p"},
    ]
    host = fresh_kernel_host({"AGENT_LOOPS": json.dumps(configured)}).start()
    found = wait_for(
        lambda: in_state(host, "nightly", "sleeping", session="configured"), 30, "loop"
    )
    assert found["loop"]["schedule"] == "0 0 2 * * *"
    assert "broken" not in loops_of(host, "configured")
