"""Per-kind failure handlers end to end: retried -> handled -> needs attention, the handler
exactly once with the original input and the last failure - in a test app, and for the tools
of the kernel's catalogue, whose task records carry the tier."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from durable_host.testing import WEBHOOK
from kernel.common import ids
from tests.app.test_notices_workflow import mailbox_call
from tests.app.test_sessions_api import final, submit, view
from tests.harness import APPS, HostProcess, store_spec_for, store_specs

OPERATOR = "ops@example.com"


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


def test_the_handler_follows_the_version_of_its_task(host: HostProcess, tmp_path: Path) -> None:
    """A handler is part of its task's tree: it runs the task's version, not whatever version
    the serving deployment gives a sub-orchestration started without one (docs/versioning.md)."""
    body = {"id": "versioned", "fail_times": 9}
    resp = host.post(f"{WEBHOOK}/orchestrators/task/task-versioned?version=0.9", body)
    assert resp.status == 202, (resp.status, resp.body)
    status = host.wait_for_status("task-versioned", timeout=60)
    assert (status["version"], status["output"]["tier"]) == ("0.9", "handled"), status
    marks = [json.loads(line) for line in (tmp_path / "marks.txt").read_text().splitlines()]
    assert [m["version"] for m in marks if m.get("handled") == "versioned"] == ["0.9"]


def test_a_failing_tool_is_retried_then_handled_once_or_left_for_a_person(
    fresh_kernel_host: Callable[..., HostProcess], mailbox: str
) -> None:
    """``write_document`` raises on its first 7 runs: 3 + 3 tries give up (the first time the
    operator's mail is refused, the second time it goes out), the 7th fails once more and the
    8th succeeds, and the 9th run is a first-try success."""
    host = fresh_kernel_host(
        {
            "AGENT_MAIL_BASE_URL": mailbox,
            "AGENT_OPERATOR_EMAIL": OPERATOR,
            "KERNEL_FAULTS": "tool.raise.write_document@7",
        }
    ).start()
    session = "failing-tools"

    def run(request_id: str, text: str) -> str:
        sub_id = submit(host, session, request_id, text).json()["submissionId"]
        final(host, session, sub_id, timeout=60)
        return ids.tool_task_id(sub_id, 1, 0)

    mailbox_call(mailbox, "/control", {"reject": [OPERATOR]})
    hopeless = run("r1", "remember alpha: one")
    mailbox_call(mailbox, "/control", {"reject": []})
    handled = run("r2", "remember beta: two")
    retried = run("r3", "remember gamma: three")
    first = run("r4", "remember delta: four")

    tasks = view(host, session)["tasks"]
    seen = {
        t: (tasks[t]["status"], tasks[t].get("tier")) for t in (hopeless, handled, retried, first)
    }
    assert seen == {
        hopeless: ("failed", "needs_attention"),
        handled: ("failed", "handled"),
        retried: ("completed", "retried"),
        first: ("completed", "ok"),
    }
    assert "tried 3 times" in tasks[handled]["reason"]
    # The handler ran once per task that gave up, with the original input and the last failure.
    given: dict[str, Any] = host.status(f"{handled}:on-failure", "?showInput=true") or {}
    assert given["runtimeStatus"] == "Completed" and given["output"]["notified"] is True
    if isinstance(given["input"], str):  # the SDK starts a child with its input as JSON text
        given["input"] = json.loads(given["input"])
    assert given["input"]["task_id"] == handled and given["input"]["attempts"] == 3
    assert given["input"]["input"]["arguments"] == {"title": "beta", "text": "two"}
    assert "injected failure 6 of 7" in given["input"]["failure"]
    refused = host.status(f"{hopeless}:on-failure") or {}
    assert refused["runtimeStatus"] == "Failed"
    mails = [m for m in mailbox_call(mailbox, "/messages")["messages"] if m["to"] == OPERATOR]
    assert len(mails) == 1 and handled in mails[0]["body"]
    for task_id in (retried, first):
        assert host.status(f"{task_id}:on-failure") is None
