"""The notices workflow end to end: a real host, the real mailbox, HTTP only, SIGKILL.

Each test gets its own host (on the store the fixture gives) and its own mailbox, creates its
session with a submission, and starts ``send_notices`` through the management API with the id
the tool task would use (``{task}:notices``). Waits are bounded polls of observable state
(custom status, history, the mailbox log), never sleeps that hope a window was hit; the only
sleep waits for a timer's recorded due time while no host runs.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from kernel.common import ids
from tests.harness import WEBHOOK, HostProcess, wait_for

FIVE = [f"customer{n}@example.com" for n in range(1, 6)]
FAST = {
    "confirm_interval_s": 0.2,
    "retry_backoff_s": 0.1,
    "max_retry_after_s": 0.2,
    "cancel_grace_s": 5,
}


# --- the mailbox -----------------------------------------------------------------------------


def mailbox_call(base_url: str, path: str, body: Any = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        base_url + path,
        data,
        {"Content-Type": "application/json"},
        method="POST" if data is not None else "GET",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.load(response)


def mail_log(base_url: str) -> list[dict[str, Any]]:
    return mailbox_call(base_url, "/log")["entries"]


def kinds_for(base_url: str, operation_id: str) -> list[str]:
    return [e["kind"] for e in mail_log(base_url) if e["operationId"] == operation_id]


def deliveries(base_url: str) -> dict[str, int]:
    return dict(Counter(e["to"] for e in mail_log(base_url) if e["kind"] == "delivery"))


# --- the app ---------------------------------------------------------------------------------


class Notices:
    """One host and one session, driven over HTTP."""

    def __init__(self, host: HostProcess, session_id: str = "notices-1") -> None:
        self.host = host
        self.session_id = session_id
        created = host.post(
            f"/api/sessions/{session_id}/submissions", {"requestId": "setup", "text": "hello"}
        )
        assert created.status == 202, created.body
        self.submission_id = created.json()["submissionId"]
        self.turn_id = created.json()["instanceId"]
        assert host.wait_for_status(self.turn_id, timeout=60)["runtimeStatus"] == "Completed"
        self.instance_id = ids.child_task_id(self.turn_id, "notices")

    def start(
        self,
        recipients: list[str],
        policy: str = "allSettled",
        settings: dict[str, Any] | None = None,
        **extra: Any,
    ) -> str:
        body = {
            "session_id": self.session_id,
            "submission_id": self.submission_id,
            "tool_task_id": self.turn_id,
            "recipients": recipients,
            "subject": "Q3 update",
            "policy": policy,
            "settings": {**FAST, **(settings or {})},
            **extra,
        }
        if "body_ref" not in body:
            body["body"] = "Your plan changes on May 1."
        return self.host.start_orchestration("send_notices", body, self.instance_id)

    def output(self, timeout: float = 60.0) -> dict[str, Any]:
        status = self.host.wait_for_status(self.instance_id, timeout=timeout)
        assert status["runtimeStatus"] == "Completed", status
        return status["output"]

    def view(self) -> dict[str, Any]:
        return self.host.get(f"/api/sessions/{self.session_id}").json()

    def plan(self) -> dict[str, Any]:
        plans = [d for d in self.view()["documents"].values() if d["type"] == "notice_plan"]
        assert len(plans) == 1
        return plans[0]["data"]

    def tasks(self) -> dict[str, dict[str, Any]]:
        return {k: v for k, v in self.view()["tasks"].items() if k.startswith(self.instance_id)}

    def child(self, n: int) -> str:
        return f"{self.instance_id}:mail-{n}"

    def history(self, instance_id: str) -> list[dict[str, Any]]:
        status = self.host.status(instance_id, "?showHistory=true") or {}
        return status.get("historyEvents", [])

    def phases(self, count: int) -> list[str | None]:
        statuses = [self.host.status(self.child(n)) or {} for n in range(1, count + 1)]
        return [(s.get("customStatus") or {}).get("phase") for s in statuses]

    def wait_phases(self, count: int, phase: str, timeout: float = 60.0) -> None:
        wait_for(
            lambda: self.phases(count) == [phase] * count,
            timeout,
            f"{count} children in phase {phase}",
        )

    def cancel(self, reason: str) -> None:
        resp = self.host.post(
            f"{WEBHOOK}/instances/{self.instance_id}/raiseEvent/cancel:{self.instance_id}",
            {"reason": reason},
        )
        assert resp.status == 202, resp.body


def at(timestamp: str) -> datetime:
    return datetime.fromisoformat(timestamp)


def by_recipient(output: dict[str, Any]) -> dict[str, str]:
    return {r["recipient"]: r["outcome"] for r in output["results"]}


@pytest.fixture
def notices_host(
    fresh_kernel_host: Callable[..., HostProcess], mailbox: str
) -> Callable[..., HostProcess]:
    def factory(**env: str) -> HostProcess:
        return fresh_kernel_host({"AGENT_MAIL_BASE_URL": mailbox, **env})

    return factory


# --- allSettled and failFast -----------------------------------------------------------------


def test_all_settled_sends_to_everyone_and_reports_the_rejected_recipient(notices_host, mailbox):
    run = Notices(notices_host().start())
    note = {
        "id": "approved-notice",
        "type": "note",
        "data": {"title": "Approved", "text": "The approved text."},
    }
    run.host.post(f"{WEBHOOK}/entities/session/{run.session_id}?op=commit", {"documents": [note]})
    wait_for(lambda: "approved-notice" in run.view()["documents"], 60, "the note")
    mailbox_call(mailbox, "/control", {"reject": ["blocked@example.com"]})
    recipients = ["ana@example.com", "blocked@example.com", "cy@example.com"]

    run.start(recipients, body_ref="approved-notice")
    output = run.output()

    assert by_recipient(output) == {
        "ana@example.com": "confirmed",
        "blocked@example.com": "rejected",
        "cy@example.com": "confirmed",
    }
    assert (output["ok"], output["kind"]) == (False, "settled")
    assert output["summary"] == "2 of 3 confirmed; 1 rejected"
    assert deliveries(mailbox) == {"ana@example.com": 1, "cy@example.com": 1}
    bodies = {m["body"] for m in mailbox_call(mailbox, "/messages")["messages"]}
    assert bodies == {"The approved text."}
    plan = run.plan()
    assert plan["body_ref"] == "approved-notice" and plan["summary"] == output["summary"]
    assert {r: v["status"] for r, v in plan["receipts"].items()} == by_recipient(output)
    tasks = run.tasks()
    assert tasks[run.instance_id]["status"] == "failed"
    assert tasks[run.instance_id]["parent"] == run.turn_id
    children = [tasks[run.child(n)]["status"] for n in (1, 2, 3)]
    assert children == ["completed", "failed", "completed"]


def test_fail_fast_stops_at_the_first_failure_and_cancels_the_rest(notices_host, mailbox):
    # The sends to ana and cy are accepted but their answers are held past the client's
    # timeout, so both children are still verifying when blocked@ is refused.
    run = Notices(notices_host(AGENT_MAIL_TIMEOUT_S="1").start())
    mailbox_call(
        mailbox,
        "/control",
        {"reject": ["blocked@example.com"], "delay_ms": 4000, "delay_after_commit": True},
    )
    recipients = ["ana@example.com", "blocked@example.com", "cy@example.com", "dee@example.com"]

    run.start(recipients, "failFast", {"max_parallel": 3, "confirm_interval_s": 120})
    output = run.output()

    assert by_recipient(output) == {
        "ana@example.com": "confirmed",
        "blocked@example.com": "rejected",
        "cy@example.com": "confirmed",
        "dee@example.com": "cancelled",
    }
    assert (output["ok"], output["kind"]) == (False, "stopped")
    assert output["summary"] == (
        "2 of 4 confirmed; 1 rejected, 1 cancelled (failFast: blocked@example.com rejected)"
    )
    # Cancelling did not make the accepted sends disappear: they were verified by query.
    receipts = run.plan()["receipts"]
    assert [receipts[a]["source"] for a in ("ana@example.com", "cy@example.com")] == [
        "confirm",
        "confirm",
    ]
    assert receipts["dee@example.com"]["status"] == "cancelled"
    assert deliveries(mailbox) == {"ana@example.com": 1, "cy@example.com": 1}
    for n in (1, 3):
        raised = [
            e["Name"]
            for e in run.history(run.child(n))
            if e["EventType"] == "EventRaised" and e["Name"].startswith("cancel:")
        ]
        assert raised == [f"cancel:{run.child(n)}"]
    assert run.host.status(run.child(4)) is None  # never started
    parent_statuses = [
        item["status"]
        for change in run.host.get(f"/api/sessions/{run.session_id}/changes?after=0").json()[
            "changes"
        ]
        for item in change["items"]
        if item.get("id") == run.instance_id
    ]
    assert parent_statuses == ["waiting", "completing", "failed"]


# --- cancellation ----------------------------------------------------------------------------


def test_cancelling_the_parent_cascades_to_children_waiting_to_retry(notices_host, mailbox):
    run = Notices(notices_host().start())
    mailbox_call(mailbox, "/control", {"fail_next": 100, "fail_status": 429, "retry_after": 60})
    recipients = ["ana@example.com", "bo@example.com", "cy@example.com"]
    run.start(recipients, settings={"max_retry_after_s": 60})
    run.wait_phases(3, "backoff")

    run.cancel("the customer withdrew the notice")
    output = run.output()

    assert set(by_recipient(output).values()) == {"cancelled"}
    assert (output["ok"], output["kind"]) == (False, "cancelled")
    assert output["summary"] == (
        "0 of 3 confirmed; 3 cancelled (cancel requested: the customer withdrew the notice)"
    )
    assert deliveries(mailbox) == {}
    tasks = run.tasks()
    assert {t["status"] for t in tasks.values()} == {"cancelled"}
    assert all(r["status"] == "cancelled" for r in run.plan()["receipts"].values())


def test_a_child_stuck_in_a_send_is_terminated_after_the_grace(notices_host, mailbox):
    # The service stores the mail, then holds its answer far longer than the grace period,
    # so the child cannot react to its cancel event: it is inside the send.
    run = Notices(notices_host(AGENT_MAIL_TIMEOUT_S="60").start())
    mailbox_call(mailbox, "/control", {"delay_ms": 30000, "delay_after_commit": True})
    run.start(["ana@example.com"], settings={"cancel_grace_s": 0.3})
    wait_for(lambda: "delayed" in {e["kind"] for e in mail_log(mailbox)}, 30, "the send")

    run.cancel("stop")
    output = run.output()

    [result] = output["results"]
    operation_id = run.plan()["receipts"]["ana@example.com"]["operation_id"]
    assert result["outcome"] == "uncertain" and operation_id in result["detail"]
    assert run.host.status(run.child(1))["runtimeStatus"] == "Terminated"
    assert run.tasks()[run.child(1)]["status"] == "interrupted"
    # Why "uncertain" and not "cancelled": the service does have the mail.
    assert deliveries(mailbox) == {"ana@example.com": 1}


# --- uncertain -------------------------------------------------------------------------------


def test_a_send_the_service_can_neither_confirm_nor_deny_ends_uncertain(notices_host, mailbox):
    run = Notices(notices_host().start())
    mailbox_call(mailbox, "/control", {"down_for": 120})

    run.start(["ana@example.com"], settings={"send_attempts": 2, "confirm_attempts": 2})
    output = run.output()

    [result] = output["results"]
    receipt = run.plan()["receipts"]["ana@example.com"]
    assert result["outcome"] == receipt["status"] == "uncertain"
    assert "2 send attempt(s) and 2 queries" in result["detail"]
    assert receipt["operation_id"] in result["detail"]
    assert run.tasks()[run.child(1)]["status"] == "interrupted"
    assert run.tasks()[run.instance_id]["status"] == "interrupted"
    assert kinds_for(mailbox, receipt["operation_id"]) == ["failure", "failure"]


# --- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "code", "field"),
    [
        ({"recipients": []}, "no_recipients", "recipients"),
        (
            {"recipients": ["ana@example.com", "ana at example.com"]},
            "invalid_recipient",
            "recipients[1]",
        ),
        (
            {"recipients": ["ana@example.com", "Ana@Example.com"]},
            "duplicate_recipient",
            "recipients[1]",
        ),
        ({"body_ref": "sha256:" + "0" * 64}, "body_not_found", "body_ref"),
        ({"body_ref": "no-such-note"}, "body_not_found", "body_ref"),
    ],
)
def test_bad_input_is_refused_before_anything_is_planned_or_sent(
    notices_host, mailbox, changes, code, field
):
    changes = dict(changes)  # the parameter is shared with the run on the other store
    run = Notices(notices_host().start())
    before = run.view()
    recipients = changes.pop("recipients", ["ana@example.com"])

    run.start(recipients, **changes)
    output = run.output()

    assert (output["ok"], output["kind"], output["results"]) == (False, "invalid", [])
    assert (output["error"]["error"], output["error"]["field"]) == (code, field)
    assert output["error"]["message"]
    assert mail_log(mailbox) == []
    assert run.view()["cursor"] == before["cursor"]


# --- crashes ---------------------------------------------------------------------------------


@pytest.mark.crash
def test_five_notices_survive_a_kill_after_mail_4_was_accepted(notices_host, mailbox):
    host = notices_host()
    run = Notices(host.start())
    host.stop()
    # One child at a time, as in the seed story. Activities complete in this order:
    # notices_prepare, then per child send_mail and notices_read (to commit the receipt).
    # The 8th completion is mail 4's send_mail: the service has accepted it, and the host
    # dies before the result is recorded anywhere.
    host.start(faults="activity.before_complete@8")
    run.start(FIVE, settings={"max_parallel": 1})
    assert host.wait_exit(60) != 0, "the fault point was not reached"
    assert deliveries(mailbox) == {address: 1 for address in FIVE[:4]}

    host.start()
    output = run.output()

    assert output["ok"] and output["summary"] == "5 of 5 confirmed"
    assert mailbox_call(mailbox, "/stats")["deliveriesByRecipient"] == {a: 1 for a in FIVE}
    assert "replayed_send" not in {e["kind"] for e in mail_log(mailbox)}
    receipts = run.plan()["receipts"]
    assert [receipts[a]["status"] for a in FIVE] == ["confirmed"] * 5
    assert [receipts[a]["source"] for a in FIVE] == ["send", "send", "send", "lookup", "send"]
    mail4, mail5 = receipts[FIVE[3]]["operation_id"], receipts[FIVE[4]]["operation_id"]
    # Mail 4 was verified by its operation id after the restart, not sent again; mail 5 was
    # sent once, after that.
    assert kinds_for(mailbox, mail4) == ["query", "delivery", "query"]
    assert kinds_for(mailbox, mail5) == ["query", "delivery"]
    seqs = [e["seq"] for e in mail_log(mailbox) if e["operationId"] in (mail4, mail5)]
    assert seqs == sorted(seqs)
    messages = mailbox_call(mailbox, "/messages")["messages"]
    sent = {m["to"]: m["messageId"] for m in messages}
    assert {a: receipts[a]["message_id"] for a in FIVE} == sent
    body = run.view()["documents"][run.plan()["body_ref"]]
    assert body["type"] == "note" and {m["body"] for m in messages} == {body["data"]["text"]}
    assert {t["status"] for t in run.tasks().values()} == {"completed"}


# Both children must still sleep when the kill comes: it follows the test's polls seeing both
# in phase "confirming", which a loaded machine can delay by seconds (and the second child
# may get there well after the first).
CONFIRM_INTERVAL_S = 10


@pytest.mark.crash
def test_children_asleep_between_confirm_attempts_wake_after_a_restart(notices_host, mailbox):
    # The service accepts both sends but holds the answers past the client's timeout, so both
    # children sleep on a durable timer before they ask; the host is killed during that sleep.
    host = notices_host(AGENT_MAIL_TIMEOUT_S="0.5")
    run = Notices(host.start())
    mailbox_call(mailbox, "/control", {"delay_ms": 3000, "delay_after_commit": True})
    recipients = ["ana@example.com", "bo@example.com"]
    run.start(recipients, settings={"confirm_interval_s": CONFIRM_INTERVAL_S})
    run.wait_phases(2, "confirming")
    host.kill()
    killed_at = datetime.now(UTC)
    mailbox_call(mailbox, "/control", {"reset": True})

    # Both timers were created before the kill, so both are due by now + the interval.
    time.sleep(CONFIRM_INTERVAL_S + 0.2)
    host.start()
    output = run.output()

    assert by_recipient(output) == {a: "confirmed" for a in recipients}
    receipts = run.plan()["receipts"]
    for n, address in enumerate(recipients, start=1):
        assert receipts[address]["source"] == "confirm"
        assert kinds_for(mailbox, receipts[address]["operation_id"]) == [
            "query",
            "delivery",
            "delayed",
            "query",
        ]
        history = run.history(run.child(n))
        [created] = [
            e
            for e in history
            if e["EventType"] == "TimerCreated" and at(e["FireAt"]) > at(e["Timestamp"])
        ]  # the sleep, not a check
        [fired] = [
            e
            for e in history
            if e["EventType"] == "TimerFired" and e["FireAt"] == created["FireAt"]
        ]
        assert at(created["Timestamp"]) < killed_at < at(fired["Timestamp"])
    assert deliveries(mailbox) == {a: 1 for a in recipients}
