"""Activities of the notices workflow: the mail client against the real mailbox service, and
the checks ``notices_prepare`` makes before anything is planned.

Each answer of the service maps to one envelope kind, and ``maybe_sent`` says whether a send
has to be verified before anyone may call it cancelled or failed.
"""

from __future__ import annotations

import asyncio
import json
import socket
import urllib.request
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

from activities import mail, notice_session

JOB = {"operation_id": "notice-test-1", "to": "ana@example.com", "subject": "Q3 update"}


def config(base_url: str, timeout: float = 5.0) -> mail.MailConfig:
    return mail.MailConfig(base_url, None, timeout)


def control(base_url: str, body: dict[str, Any]) -> None:
    request = urllib.request.Request(
        base_url + "/control",
        json.dumps(body).encode(),
        {"Content-Type": "application/json"},
        method="POST",
    )
    urllib.request.urlopen(request, timeout=5).close()


def log_kinds(base_url: str, operation_id: str) -> list[str]:
    with urllib.request.urlopen(base_url + "/log", timeout=5) as response:
        entries = json.load(response)["entries"]
    return [e["kind"] for e in entries if e["operationId"] == operation_id]


def send(cfg: mail.MailConfig, job: dict[str, Any] = JOB, body: str = "Hello.") -> dict[str, Any]:
    return asyncio.run(mail.send(cfg, job, body))


def test_a_send_is_delivered_once_and_a_second_run_finds_it_by_look_up(mailbox: str) -> None:
    first = send(config(mailbox))
    again = send(config(mailbox))

    assert (first["ok"], first["kind"], first["receipt"]["source"]) == (True, "accepted", "send")
    assert (again["kind"], again["receipt"]["source"]) == ("accepted", "lookup")
    assert again["receipt"]["message_id"] == first["receipt"]["message_id"]
    assert log_kinds(mailbox, JOB["operation_id"]) == ["query", "delivery", "query"]


def test_a_rejected_recipient_is_a_definite_no(mailbox: str) -> None:
    control(mailbox, {"reject": [JOB["to"]]})

    answer = send(config(mailbox))

    assert (answer["ok"], answer["kind"], answer["code"], answer["maybe_sent"]) == (
        False,
        "rejected",
        "recipient_rejected",
        False,
    )


def test_a_rate_limit_is_transient_and_proves_nothing_was_sent(mailbox: str) -> None:
    control(mailbox, {"fail_next": 1, "fail_status": 429, "retry_after": 7})

    answer = send(config(mailbox))

    assert answer["kind"] == "transient"
    assert (answer["retry_after"], answer["maybe_sent"]) == (7.0, False)


def test_an_outage_is_transient_but_must_be_verified(mailbox: str) -> None:
    control(mailbox, {"down_for": 30})

    answer = send(config(mailbox))
    query = asyncio.run(mail.lookup(config(mailbox), JOB["operation_id"]))

    assert (answer["kind"], answer["maybe_sent"]) == ("transient", True)
    assert 0 < answer["retry_after"] <= 30
    assert (query["ok"], query["kind"]) == (False, "transient")
    assert log_kinds(mailbox, JOB["operation_id"]) == ["failure"]


def test_an_answer_lost_after_the_commit_is_unknown_and_a_query_settles_it(mailbox: str) -> None:
    control(mailbox, {"delay_ms": 3000, "delay_after_commit": True})

    answer = send(config(mailbox, timeout=0.3))
    query = asyncio.run(mail.lookup(config(mailbox), JOB["operation_id"]))

    assert (answer["kind"], answer["code"], answer["maybe_sent"]) == ("unknown", "no_answer", True)
    assert (query["kind"], query["receipt"]["source"]) == ("accepted", "confirm")
    assert query["receipt"]["to"] == JOB["to"]


def test_an_operation_the_service_never_accepted_is_not_found(mailbox: str) -> None:
    query = asyncio.run(mail.lookup(config(mailbox), "notice-never-sent"))

    assert (query["ok"], query["kind"], query["code"]) == (False, "rejected", "not_found")


def test_a_key_reused_for_another_payload_is_rejected(mailbox: str) -> None:
    send(config(mailbox))

    answer = asyncio.run(mail.post(config(mailbox), {**JOB, "subject": "Other"}, "Hello."))

    assert (answer["kind"], answer["code"]) == ("rejected", "idempotency_key_reused")


def test_an_unreachable_service_is_transient_and_nothing_was_sent() -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]

    answer = send(config(f"http://127.0.0.1:{port}"))

    assert (answer["kind"], answer["maybe_sent"]) == ("transient", False)


def test_retry_after_is_read_as_seconds_or_as_a_date() -> None:
    now = datetime(2030, 1, 1, tzinfo=UTC)
    assert mail.parse_retry_after("3") == 3.0
    later = format_datetime(now + timedelta(seconds=90), usegmt=True)

    assert mail.parse_retry_after(later, now) == 90.0
    assert mail.parse_retry_after("soon") is None
    assert mail.parse_retry_after(None) is None


def test_notice_settings_are_read_from_app_settings_by_field_name() -> None:
    found, problem = notice_session.settings_from_env(
        {
            "AGENT_NOTICE_CONFIRM_INTERVAL_S": "0.5",
            "AGENT_NOTICE_MAX_PARALLEL": "2",
            "AGENT_OTHER": "x",
        }
    )

    assert (found, problem) == ({"confirm_interval_s": 0.5, "max_parallel": 2}, None)
    _, problem = notice_session.settings_from_env({"AGENT_NOTICE_SEND_ATTEMPTS": "many"})
    assert problem is not None and problem["error"] == "invalid_setting"


def test_prepare_names_the_first_missing_precondition() -> None:
    job = {"session_id": "s-1", "submission_id": "sub-1", "tool_task_id": "t-1"}
    state = {"submissions": {"sub-1": {}}, "tasks": {"t-1": {}}}

    assert notice_session.check_state(state, job) is None
    assert notice_session.check_state(None, job)["error"] == "session_not_found"
    assert notice_session.check_state({**state, "submissions": {}}, job)["field"] == "submission_id"
    assert notice_session.check_state({**state, "tasks": {}}, job)["error"] == "unknown_parent"
    assert notice_session.check_state({**state, "tasks": {}}, {**job, "tool_task_id": None}) is None
