"""Defects of the app found by probing, each pinned through the real HTTP API on a real host.

* A lone surrogate (``"\\ud800"``, valid JSON) in a submission was accepted, killed the turn and
  left the session busy forever (and made submit answer 500 in a text over 4 KiB): every text
  field of every route is now refused with 400 ``invalid_unicode`` naming the field.
* A turn that failed (an entity call the host quarantined) or ended without running its own
  code (terminated by an operator) left its submission ``active`` and every later one ``queued``:
  a failing turn now ends its submission as ``failed`` and hands over, and the next queued
  submission passes over a turn that has ended (``orchestrators/agent_turn.py``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from kernel.common import ids
from tests.app.turn_support import ModelServer, submission, wait_final
from tests.harness import WEBHOOK, HostProcess, wait_for

LONE = "\ud800"


def post_raw(host: HostProcess, path: str, body: dict) -> tuple[int, dict]:
    # json.dumps escapes the lone surrogate as \ud800: valid JSON, as a client would send it.
    resp = host.request("POST", path, raw=json.dumps(body).encode("ascii"))
    return resp.status, resp.json()


def submit(host: HostProcess, session: str, request_id: str, text: str) -> str:
    status, body = post_raw(
        host, f"/api/sessions/{session}/submissions", {"requestId": request_id, "text": text}
    )
    assert status == 202, body
    return str(body["submissionId"])


def delete(host: HostProcess, session: str) -> int:
    return host.request("DELETE", f"/api/sessions/{session}").status


@pytest.fixture
def model() -> Iterator[ModelServer]:
    server = ModelServer().start()
    yield server
    server.stop()


# --- text at the boundary -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"requestId": "r1", "text": f"a{LONE}b"}, "text"),
        ({"requestId": "r1", "text": "x" * 5000 + LONE}, "text"),  # was a 500
        ({"requestId": f"r{LONE}", "text": "hello"}, "requestId"),
        ({"requestId": "r1", f"te{LONE}xt": "hello"}, "body"),
    ],
)
def test_a_lone_surrogate_is_refused_and_stores_nothing(
    kernel_host: HostProcess, body: dict, field: str
) -> None:
    status, error = post_raw(kernel_host, "/api/sessions/lone/submissions", body)

    assert status == 400, error
    assert error["field"] == field
    assert error["error"] in ("invalid_unicode", "invalid_request_id", "unknown_field")
    if field == "text":
        assert error["error"] == "invalid_unicode"
    assert kernel_host.get("/api/sessions/lone").status == 404


def test_operator_and_approval_bodies_and_ids_refuse_lone_surrogates(
    kernel_host: HostProcess,
) -> None:
    sub = ids.submission_id("ops", "r1")
    for path, body in [
        (
            f"/api/sessions/ops/submissions/{sub}/operator",
            {"requestId": f"a{LONE}", "action": "retry"},
        ),
        ("/api/sessions/ops/approvals/t1", {"requestId": "a", "decision": f"approve{LONE}"}),
        ("/api/sessions/ops/approvals/t1", {"requestId": "a", "decision": "approve", LONE: 1}),
    ]:
        status, error = post_raw(kernel_host, path, body)
        assert status == 400, (path, error)
        assert error["error"] in ("invalid_unicode", "invalid_request_id"), error
    # A lone surrogate percent-encoded in a route id (its UTF-8-like bytes ED A0 80).
    resp = kernel_host.request(
        "POST",
        "/api/sessions/ops/approvals/t%ED%A0%80",
        raw=b'{"requestId":"a","decision":"approve"}',
    )
    assert resp.status in (400, 404), resp.body


def test_a_session_that_refused_a_lone_surrogate_keeps_working(kernel_host: HostProcess) -> None:
    status, _ = post_raw(
        kernel_host, "/api/sessions/after/submissions", {"requestId": "r1", "text": f"a{LONE}b"}
    )
    assert status == 400
    first = submit(kernel_host, "after", "r2", "first")
    second = submit(kernel_host, "after", "r3", "second")

    assert wait_final(kernel_host, "after", first)["status"] == "completed"
    assert wait_final(kernel_host, "after", second)["status"] == "completed"
    kernel_host.wait_for_status(ids.turn_instance_id("after", second))
    assert delete(kernel_host, "after") == 200


# --- a turn never blocks the queue ------------------------------------------------------------


def test_a_quarantined_entity_call_fails_the_turn_not_the_session(fresh_kernel_host) -> None:
    # One attempt only: the batch the host dies in is quarantined at the restart. The session
    # entity's second batch is the turn's "running" commit, after the accept.
    host = fresh_kernel_host({"DURABLE_HOST_POISON_ATTEMPTS": "1"})
    host.start(faults="entity.before_commit@2")
    first = submit(host, "poison", "r1", "first")
    assert host.wait_exit(60) != 0, "the fault point was not reached"
    host.start()

    failed = wait_final(host, "poison", first)
    assert failed["status"] == "failed"
    turn = host.get("/api/sessions/poison").json()["tasks"][ids.turn_instance_id("poison", first)]
    assert "quarantined" in (turn["reason"] or ""), turn
    second = submit(host, "poison", "r2", "second")
    assert wait_final(host, "poison", second)["status"] == "completed"
    host.wait_for_status(ids.turn_instance_id("poison", second))
    assert delete(host, "poison") == 200


def test_a_terminated_turn_hands_the_queue_to_the_next_submission(
    fresh_kernel_host, model: ModelServer
) -> None:
    host = fresh_kernel_host({"AGENT_MODEL_BASE_URL": model.base_url}).start()
    held = model.hold()
    first = submit(host, "stuck", "r1", "first")
    assert held.arrived.wait(60), "the first turn never called the model"
    second = submit(host, "stuck", "r2", "second")
    wait_for(lambda: submission(host, "stuck", second).get("status") == "queued", 60, "queued")
    turn = ids.turn_instance_id("stuck", first)
    resp = host.post(f"{WEBHOOK}/instances/{turn}/terminate?reason=operator+stop")
    assert resp.status == 202, resp.body

    # The second submission's poll (30 s) finds the first turn ended and takes over.
    done = wait_final(host, "stuck", second, timeout=90)
    assert done["status"] == "completed"
    stopped = submission(host, "stuck", first)
    assert stopped["status"] == "failed"
    reason = host.get("/api/sessions/stuck").json()["tasks"][turn]["reason"]
    assert "Terminated" in reason and "operator stop" in reason, reason
    # What ran under the dead turn was stopped too, so the session can be deleted.
    assert (host.status(f"{turn}:run") or {}).get("runtimeStatus") == "Terminated"
    host.wait_for_status(ids.turn_instance_id("stuck", second))
    held.release()
    wait_for(lambda: delete(host, "stuck") == 200, 30, "the session to be deletable")
