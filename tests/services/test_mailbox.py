"""The mailbox as a real process: idempotent sends, definite queries, faults, durability."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pytest

from services.mailbox.testing import start_mailbox, stop_mailbox

NOTICE = {"to": "ana@example.com", "subject": "Notice", "body": "Your plan changes on May 1."}


class Answer:
    def __init__(self, status: int, headers: dict[str, str], body: Any) -> None:
        self.status = status
        self.headers = headers
        self.body = body


def call(
    method: str,
    url: str,
    body: Any = None,
    *,
    key: str | None = None,
    raw: bytes | None = None,
    timeout: float = 2.0,
) -> Answer:
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    if key is not None:
        request.add_header("Idempotency-Key", key)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return Answer(response.status, dict(response.headers), json.loads(response.read()))
    except urllib.error.HTTPError as exc:
        with exc:
            return Answer(exc.code, dict(exc.headers), json.loads(exc.read()))


def send(url: str, key: str, payload: dict[str, Any] = NOTICE, **kwargs: Any) -> Answer:
    return call("POST", f"{url}/messages", payload, key=key, **kwargs)


def log_kinds(url: str) -> list[tuple[str, str | None]]:
    entries = call("GET", f"{url}/log").body["entries"]
    return [(entry["kind"], entry["operationId"]) for entry in entries]


def control(url: str, **faults: Any) -> Answer:
    answer = call("POST", f"{url}/control", faults)
    assert answer.status == 200, answer.body
    return answer


def test_health_answers_ok(mailbox) -> None:
    assert call("GET", f"{mailbox.url}/health").body == {"ok": True}


def test_first_send_delivers_and_a_retry_replays_the_same_message(mailbox) -> None:
    first = send(mailbox.url, "op-1")
    retry = send(mailbox.url, "op-1")

    assert first.status == 201
    assert first.body["replayed"] is False
    assert first.body["operationId"] == "op-1"
    assert first.body["to"] == NOTICE["to"]
    assert retry.status == 200
    assert retry.body == {**first.body, "replayed": True}
    assert log_kinds(mailbox.url) == [("delivery", "op-1"), ("replayed_send", "op-1")]
    stats = call("GET", f"{mailbox.url}/stats").body
    assert stats["deliveriesByRecipient"] == {NOTICE["to"]: 1}
    assert stats["counts"]["delivery"] == 1


def test_reusing_a_key_for_another_payload_is_409_and_changes_nothing(mailbox) -> None:
    original = send(mailbox.url, "op-1")

    reused = send(mailbox.url, "op-1", {**NOTICE, "body": "Something else."})

    assert reused.status == 409
    assert reused.body["error"] == "idempotency_key_reused"
    assert reused.body["field"] == "Idempotency-Key"
    stored = call("GET", f"{mailbox.url}/messages/{original.body['messageId']}").body
    assert stored["body"] == NOTICE["body"]
    assert log_kinds(mailbox.url) == [("delivery", "op-1")]


def test_query_by_operation_id_finds_the_message_or_says_definitely_not(mailbox) -> None:
    receipt = send(mailbox.url, "op-1").body

    found = call("GET", f"{mailbox.url}/messages?operationId=op-1")
    missing = call("GET", f"{mailbox.url}/messages?operationId=op-2")

    assert found.status == 200
    assert found.body["found"] is True
    assert found.body["message"]["messageId"] == receipt["messageId"]
    assert found.body["message"]["subject"] == NOTICE["subject"]
    assert missing.status == 200
    assert missing.body == {"operationId": "op-2", "found": False}
    assert log_kinds(mailbox.url) == [("delivery", "op-1"), ("query", "op-1"), ("query", "op-2")]


def test_messages_are_listed_in_order_and_fetched_by_id(mailbox) -> None:
    ids = [
        send(mailbox.url, f"op-{n}", {**NOTICE, "to": f"c{n}@example.com"}).body["messageId"]
        for n in range(3)
    ]

    listed = call("GET", f"{mailbox.url}/messages").body["messages"]
    unknown = call("GET", f"{mailbox.url}/messages/msg_unknown")

    assert [message["messageId"] for message in listed] == ids
    assert call("GET", f"{mailbox.url}/messages/{ids[1]}").body["to"] == "c1@example.com"
    assert unknown.status == 404
    assert unknown.body["error"] == "not_found"


def test_fail_next_answers_the_status_with_retry_after_and_stores_nothing(mailbox) -> None:
    control(mailbox.url, fail_next=2, fail_status=503, retry_after=7)

    refused = [send(mailbox.url, "op-1") for _ in range(2)]
    accepted = send(mailbox.url, "op-1")

    assert [answer.status for answer in refused] == [503, 503]
    assert all(answer.headers["Retry-After"] == "7" for answer in refused)
    assert refused[0].body["error"] == "injected_failure"
    assert accepted.status == 201
    assert log_kinds(mailbox.url) == [
        ("failure", "op-1"),
        ("failure", "op-1"),
        ("delivery", "op-1"),
    ]


def test_an_outage_refuses_service_routes_but_not_control_log_and_stats(mailbox) -> None:
    control(mailbox.url, down_for=60)

    health = call("GET", f"{mailbox.url}/health")
    refused = send(mailbox.url, "op-1")
    observed = [call("GET", f"{mailbox.url}/{path}").status for path in ("log", "stats", "control")]
    control(mailbox.url, down_for=0)

    assert health.status == 503
    assert refused.status == 503
    assert int(refused.headers["Retry-After"]) >= 1
    assert observed == [200, 200, 200]
    assert call("GET", f"{mailbox.url}/messages").body == {"messages": []}
    assert log_kinds(mailbox.url) == [("failure", "op-1")]
    assert send(mailbox.url, "op-1").status == 201


def test_an_answer_delayed_after_commit_leaves_the_client_uncertain_and_the_query_sure(
    mailbox,
) -> None:
    control(mailbox.url, delay_ms=2000, delay_after_commit=True)

    with pytest.raises(TimeoutError):
        send(mailbox.url, "op-4", timeout=0.5)
    verdict = call("GET", f"{mailbox.url}/messages?operationId=op-4").body
    control(mailbox.url, reset=True)
    retry = send(mailbox.url, "op-4")

    assert verdict["found"] is True
    assert retry.status == 200
    assert retry.body["replayed"] is True
    assert retry.body["messageId"] == verdict["message"]["messageId"]
    assert log_kinds(mailbox.url) == [
        ("delivery", "op-4"),
        ("delayed", "op-4"),
        ("query", "op-4"),
        ("replayed_send", "op-4"),
    ]


def test_a_rejected_recipient_gets_422_a_log_entry_and_no_delivery(mailbox) -> None:
    control(mailbox.url, reject=["Ana@Example.com"])

    rejected = send(mailbox.url, "op-1")

    assert rejected.status == 422
    assert rejected.body == {
        "error": "recipient_rejected",
        "message": rejected.body["message"],
        "field": "to",
    }
    assert call("GET", f"{mailbox.url}/messages").body == {"messages": []}
    assert log_kinds(mailbox.url) == [("rejected", "op-1")]
    assert call("GET", f"{mailbox.url}/control").body["reject"] == ["ana@example.com"]


def test_reset_clears_faults_but_keeps_data(mailbox) -> None:
    send(mailbox.url, "op-1")
    control(mailbox.url, fail_next=3, delay_ms=10, reject=["x@example.com"])

    faults = control(mailbox.url, reset=True).body

    assert faults["fail_next"] == 0
    assert faults["delay_ms"] == 0
    assert faults["reject"] == []
    assert len(call("GET", f"{mailbox.url}/messages").body["messages"]) == 1


BAD_SENDS = [
    pytest.param(None, NOTICE, None, "Idempotency-Key", id="missing-key"),
    pytest.param("", NOTICE, None, "Idempotency-Key", id="empty-key"),
    pytest.param("k" * 201, NOTICE, None, "Idempotency-Key", id="long-key"),
    pytest.param("op", None, b"{not json", None, id="invalid-json"),
    pytest.param("op", None, b"[1, 2]", None, id="not-an-object"),
    pytest.param("op", {"subject": "s", "body": "b"}, None, "to", id="missing-to"),
    pytest.param("op", {**NOTICE, "to": "ana.example.com"}, None, "to", id="no-at"),
    pytest.param("op", {**NOTICE, "to": "a@b@example.com"}, None, "to", id="two-ats"),
    pytest.param("op", {**NOTICE, "to": "@example.com"}, None, "to", id="empty-local"),
    pytest.param("op", {**NOTICE, "to": "ana@localhost"}, None, "to", id="undotted-domain"),
    pytest.param("op", {**NOTICE, "to": "ana @example.com"}, None, "to", id="space"),
    pytest.param("op", {**NOTICE, "to": 7}, None, "to", id="to-not-string"),
    pytest.param("op", {"to": "a@b.co", "body": "b"}, None, "subject", id="missing-subject"),
    pytest.param("op", {**NOTICE, "subject": ["s"]}, None, "subject", id="subject-not-string"),
    pytest.param("op", {**NOTICE, "subject": "a\r\nBcc: x@y.z"}, None, "subject", id="crlf"),
    pytest.param("op", {**NOTICE, "body": None}, None, "body", id="body-not-string"),
    pytest.param("op", {**NOTICE, "body": "x" * (64 * 1024 + 1)}, None, "body", id="body-too-big"),
    pytest.param("op", {**NOTICE, "cc": "b@example.com"}, None, "cc", id="unknown-field"),
]


@pytest.mark.parametrize(("key", "payload", "raw", "field"), BAD_SENDS)
def test_a_bad_send_is_400_naming_the_field_and_stores_nothing(
    shared_mailbox, key, payload, raw, field
) -> None:
    answer = call("POST", f"{shared_mailbox.url}/messages", payload, key=key, raw=raw)

    assert answer.status == 400
    assert set(answer.body) == {"error", "message", "field"}
    assert answer.body["field"] == field
    assert call("GET", f"{shared_mailbox.url}/messages").body == {"messages": []}
    assert call("GET", f"{shared_mailbox.url}/log").body == {"entries": []}


BAD_CONTROLS = [
    pytest.param({"fail_next": -1}, "fail_next", id="negative-count"),
    pytest.param({"fail_next": True}, "fail_next", id="bool-count"),
    pytest.param({"fail_next": 1, "fail_status": 200}, "fail_status", id="success-status"),
    pytest.param({"retry_after": 3}, "fail_next", id="retry-after-alone"),
    pytest.param({"down_for": "soon"}, "down_for", id="down-for-text"),
    pytest.param({"delay_ms": 10**9}, "delay_ms", id="huge-delay"),
    pytest.param({"delay_after_commit": "yes"}, "delay_after_commit", id="delay-flag-text"),
    pytest.param({"reject": "a@example.com"}, "reject", id="reject-not-list"),
    pytest.param({"reject": ["not-an-address"]}, "reject", id="reject-bad-address"),
    pytest.param({"reset": False}, "reset", id="reset-false"),
    pytest.param({"explode": True}, "explode", id="unknown-field"),
]


@pytest.mark.parametrize(("body", "field"), BAD_CONTROLS)
def test_a_bad_control_is_400_naming_the_field_and_changes_no_fault(
    shared_mailbox, body, field
) -> None:
    before = call("GET", f"{shared_mailbox.url}/control").body

    answer = call("POST", f"{shared_mailbox.url}/control", body)

    assert answer.status == 400
    assert answer.body["field"] == field
    assert call("GET", f"{shared_mailbox.url}/control").body == before


def test_bad_queries_and_unknown_routes_get_json_errors(shared_mailbox) -> None:
    empty_id = call("GET", f"{shared_mailbox.url}/messages?operationId=")
    odd_param = call("GET", f"{shared_mailbox.url}/messages?status=sent")
    no_route = call("GET", f"{shared_mailbox.url}/nowhere")
    too_big = call("POST", f"{shared_mailbox.url}/messages", raw=b"x" * (2 * 1024 * 1024), key="k")

    assert (empty_id.status, empty_id.body["field"]) == (400, "operationId")
    assert (odd_param.status, odd_param.body["field"]) == (400, "status")
    assert (no_route.status, no_route.body["error"]) == (404, "not_found")
    assert (too_big.status, too_big.body["error"]) == (413, "payload_too_large")
    assert call("GET", f"{shared_mailbox.url}/log").body == {"entries": []}


@pytest.mark.crash
def test_a_sigkilled_mailbox_restarts_with_its_messages_and_log(mailbox) -> None:
    receipt = send(mailbox.url, "op-1").body
    log_before = call("GET", f"{mailbox.url}/log").body["entries"]

    mailbox.process.kill()
    mailbox.process.wait(5)
    stop_mailbox(mailbox.process)
    mailbox.process, mailbox.url = start_mailbox(mailbox.db)

    assert call("GET", f"{mailbox.url}/log").body["entries"] == log_before
    found = call("GET", f"{mailbox.url}/messages?operationId=op-1").body
    assert found["message"]["messageId"] == receipt["messageId"]
    retry = send(mailbox.url, "op-1")
    assert (retry.status, retry.body["messageId"]) == (200, receipt["messageId"])
    assert call("GET", f"{mailbox.url}/stats").body["counts"]["delivery"] == 1


def test_sigterm_ends_the_mailbox_with_status_zero(tmp_path) -> None:
    process, url = start_mailbox(tmp_path / "m.db")
    send(url, "op-1")

    status = stop_mailbox(process)

    assert status == 0
