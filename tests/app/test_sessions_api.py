"""The sessions HTTP API end to end, on a real durable host and whatever store the fixture gives.

Idempotent submissions (concurrent duplicates, a retry after completion), one turn at a time
in acceptance order, the change stream followed across disconnects, session purge, and every
bad input. To hold a session busy, a test accepts a submission directly in the session entity
(a "holder" with no turn running it) and later finishes it and hands the turn over exactly as
``agent_turn`` does; every other step runs through the app.
"""

from __future__ import annotations

import itertools
import json
import threading
import urllib.error
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from kernel.common import content, ids
from tests.harness import WEBHOOK, HostProcess, Response, wait_for

FINAL = ("completed", "failed", "cancelled")
ROOT = Path(__file__).resolve().parents[2]


# --- helpers --------------------------------------------------------------------------


def submit(host: HostProcess, session: str, request_id: str, text: str) -> Response:
    return host.post(
        f"/api/sessions/{session}/submissions", {"requestId": request_id, "text": text}
    )


def submission(host: HostProcess, session: str, sub_id: str) -> dict[str, Any]:
    resp = host.get(f"/api/sessions/{session}/submissions/{sub_id}")
    assert resp.status == 200, resp.body
    return resp.json()


def in_status(
    host: HostProcess, session: str, sub_id: str, statuses: tuple[str, ...]
) -> dict[str, Any] | None:
    sub = submission(host, session, sub_id)
    return sub if sub["status"] in statuses else None


def final(host: HostProcess, session: str, sub_id: str, timeout: float = 60) -> dict[str, Any]:
    """The submission is final and its turn orchestration has ended too (the turn finishes
    the submission in the entity first, then hands over and completes)."""
    done = wait_for(
        lambda: in_status(host, session, sub_id, FINAL), timeout, f"submission {sub_id} to finish"
    )
    host.wait_for_status(f"{session}:turn:{sub_id}", timeout=timeout)
    return done


def view(host: HostProcess, session: str) -> dict[str, Any]:
    resp = host.get(f"/api/sessions/{session}")
    assert resp.status == 200, resp.body
    return resp.json()


def changes(
    host: HostProcess, session: str, after: int, query: str = "", timeout: float = 30
) -> Response:
    return host.get(f"/api/sessions/{session}/changes?after={after}{query}", timeout=timeout)


def instances(host: HostProcess, prefix: str) -> list[dict[str, Any]]:
    resp = host.get(f"{WEBHOOK}/instances?instanceIdPrefix={prefix}")
    assert resp.status == 200
    return resp.json()


def signal(host: HostProcess, session: str, op: str, body: dict[str, Any]) -> None:
    resp = host.post(f"{WEBHOOK}/entities/session/{session}?op={op}", body)
    assert resp.status == 202, resp.body


def hold(host: HostProcess, session: str) -> str:
    """Make the session busy: a submission accepted with no turn running it."""
    signal(host, session, "accept", {"request_id": "holder", "text": "hold the turn"})
    holder = ids.submission_id(session, "holder")
    wait_for(
        lambda: host.get(f"/api/sessions/{session}/submissions/{holder}").status == 200,
        60,
        "the holder",
    )
    return holder


def release(host: HostProcess, session: str, holder: str) -> None:
    """Finish the holder; the turn passes to the first queued submission, if any."""
    before = view(host, session)
    signal(host, session, "finish", {"submission_id": holder, "status": "completed"})
    wait_for(lambda: view(host, session)["active_submission"] != holder, 60, "the holder to finish")
    following = view(host, session)["active_submission"]
    if following and following in before["turn_queue"]:
        resp = host.post(
            f"{WEBHOOK}/instances/{ids.turn_instance_id(session, following)}/raiseEvent/turn:{following}",
            "go",
        )
        assert resp.status == 202, resp.body


def entries_of(state: dict[str, Any], sub_id: str) -> list[tuple[str, str | None]]:
    return [(e["role"], e["text"]) for e in state["entries"] if e["submission_id"] == sub_id]


def answer(text: str) -> str:
    words = len(text.split())
    return f'You said: "{text}" ({words} word{"s" if words != 1 else ""}).'


# --- submissions ----------------------------------------------------------------------


def test_a_submission_runs_and_answers(kernel_host: HostProcess) -> None:
    resp = submit(kernel_host, "basic", "r1", "hello there")

    assert resp.status == 202
    body = resp.json()
    sub_id = ids.submission_id("basic", "r1")
    assert body["submissionId"] == sub_id and body["duplicate"] is False
    assert body["instanceId"] == f"basic:turn:{sub_id}"
    assert resp.headers["Location"] == body["submission"]
    assert body["page"].endswith("/api/sessions/basic/page")
    done = final(kernel_host, "basic", sub_id)
    assert (done["status"], done["answer"]) == ("completed", answer("hello there"))
    state = view(kernel_host, "basic")
    assert entries_of(state, sub_id) == [
        ("user", "hello there"),
        ("assistant", answer("hello there")),
    ]
    assert state["tasks"][body["instanceId"]]["status"] == "completed"


def test_ten_concurrent_duplicates_make_one_submission_and_one_run(
    kernel_host: HostProcess,
) -> None:
    barrier = threading.Barrier(10)

    def post(_: int) -> Response:
        barrier.wait(10)
        return submit(kernel_host, "dup", "same-request", "only once")

    with ThreadPoolExecutor(10) as pool:
        replies = list(pool.map(post, range(10)))

    sub_id = ids.submission_id("dup", "same-request")
    assert [r.status for r in replies] == [202] * 10
    assert {r.json()["submissionId"] for r in replies} == {sub_id}
    assert any(not r.json()["duplicate"] for r in replies)
    assert final(kernel_host, "dup", sub_id)["status"] == "completed"
    state = view(kernel_host, "dup")
    assert list(state["submissions"]) == [sub_id]
    assert entries_of(state, sub_id) == [("user", "only once"), ("assistant", answer("only once"))]
    turns = [i for i in instances(kernel_host, "dup:turn:") if i["name"] == "agent_turn"]
    runs = [i for i in instances(kernel_host, "dup:turn:") if i["name"] == "agent_run"]
    assert len(turns) == 1 and len(runs) == 1


def test_a_retry_after_completion_returns_the_original_and_runs_nothing(
    kernel_host: HostProcess,
) -> None:
    first = submit(kernel_host, "retry", "r1", "first text").json()
    final(kernel_host, "retry", first["submissionId"])
    before_view = view(kernel_host, "retry")
    before_turns = instances(kernel_host, "retry:")

    again = submit(kernel_host, "retry", "r1", "a different text")

    assert again.status == 202
    body = again.json()
    assert (body["submissionId"], body["duplicate"], body["status"]) == (
        first["submissionId"],
        True,
        "completed",
    )
    assert view(kernel_host, "retry") == before_view
    assert instances(kernel_host, "retry:") == before_turns
    assert submission(kernel_host, "retry", first["submissionId"])["answer"] == answer("first text")


def test_a_late_racing_start_that_restarts_a_finished_turn_runs_nothing(
    kernel_host: HostProcess,
) -> None:
    """Two first requests both saw nothing and both started the turn; the second start came
    after the first turn had finished, and the extension restarts a completed instance."""
    first = submit(kernel_host, "race", "r1", "the original").json()
    final(kernel_host, "race", first["submissionId"])
    before = view(kernel_host, "race")
    children = instances(kernel_host, first["instanceId"] + ":")
    job = {"session_id": "race", "request_id": "r1", "submission_id": first["submissionId"],
           "text": "the loser's text"}  # fmt: skip

    kernel_host.start_orchestration("agent_turn", job, first["instanceId"])
    restarted = kernel_host.wait_for_status(first["instanceId"])

    assert restarted["output"]["duplicate"] is True
    assert restarted["output"]["answer"] == answer("the original")
    assert view(kernel_host, "race") == before
    assert instances(kernel_host, first["instanceId"] + ":") == children  # no run started again


def test_a_long_text_is_stored_by_reference(kernel_host: HostProcess) -> None:
    text = "word " * 1_500
    sub_id = submit(kernel_host, "long", "r1", text).json()["submissionId"]

    done = final(kernel_host, "long", sub_id)

    assert done["text"] is None and done["text_ref"] == content.content_ref(text)
    user_entry = view(kernel_host, "long")["entries"][0]
    assert (user_entry["text"], user_entry["content_ref"]) == (None, done["text_ref"])
    status = kernel_host.status(f"long:turn:{sub_id}")
    assert status is not None and text not in json.dumps(status["input"])


def test_submissions_wait_for_their_turn_in_acceptance_order(kernel_host: HostProcess) -> None:
    holder = hold(kernel_host, "queue")
    texts = ["alpha one", "beta two", "gamma three"]
    subs = []
    for position, text in enumerate(texts, start=1):
        sub_id = submit(kernel_host, "queue", f"q{position}", text).json()["submissionId"]
        queued = wait_for(
            lambda s=sub_id: in_status(kernel_host, "queue", s, ("queued",)), 60, f"{text} to queue"
        )
        assert queued["position"] == position
        subs.append(sub_id)
    assert view(kernel_host, "queue")["turn_queue"] == subs

    release(kernel_host, "queue", holder)

    done = [final(kernel_host, "queue", s) for s in subs]
    assert [d["answer"] for d in done] == [answer(t) for t in texts]
    for earlier, later in itertools.pairwise(done):
        assert later["started_at"] >= earlier["finished_at"]
    state = view(kernel_host, "queue")
    order = [(e["role"], e["submission_id"]) for e in state["entries"]]
    assert order == [("user", holder)] + [("user", s) for s in subs] + [
        ("assistant", s) for s in subs
    ]


# --- the change stream ----------------------------------------------------------------


def follow_until(
    host: HostProcess, session: str, cursor: int, done: Any, page: int = 2
) -> tuple[list[dict[str, Any]], int]:
    """Follow in small pages; every third request's reply is lost (the client hangs up)."""
    seen: list[dict[str, Any]] = []
    for round_no in range(500):
        if round_no % 3 == 2:
            lose_a_reply(host, session, cursor)
            continue
        resp = changes(host, session, cursor, f"&wait=2&limit={page}")
        assert resp.status == 200, resp.body
        body = resp.json()
        seen += body["changes"]
        cursor = body["cursor"]
        if not body["changes"] and done():
            return seen, cursor
    raise AssertionError("the stream did not settle")


def lose_a_reply(host: HostProcess, session: str, cursor: int) -> None:
    """A client that gives up on its request, or dies before it reads the answer."""
    try:
        changes(host, session, cursor, "&wait=5", timeout=0.3)
    except (TimeoutError, urllib.error.URLError):
        pass


def test_a_reconnecting_client_sees_every_change_exactly_once(kernel_host: HostProcess) -> None:
    first = submit(kernel_host, "stream", "r0", "warm up").json()["submissionId"]
    final(kernel_host, "stream", first)
    start = view(kernel_host, "stream")["cursor"]
    subs = [
        submit(kernel_host, "stream", f"r{i}", f"message {i}").json()["submissionId"]
        for i in range(1, 4)
    ]

    def all_done() -> bool:
        return all(submission(kernel_host, "stream", s)["status"] in FINAL for s in subs)

    seen, end = follow_until(kernel_host, "stream", start, all_done)

    cursors = [r["cursor"] for r in seen]
    assert cursors == list(range(start + 1, end + 1))
    assert end == view(kernel_host, "stream")["cursor"]
    assert seen == changes(kernel_host, "stream", start).json()["changes"]
    finished = {
        i["id"]
        for r in seen
        for i in r["items"]
        if i["type"] == "submission" and i["status"] == "completed"
    }
    assert finished == set(subs)


def test_a_waiting_reader_is_answered_when_a_change_is_committed(kernel_host: HostProcess) -> None:
    sub_id = submit(kernel_host, "wake", "r1", "first").json()["submissionId"]
    final(kernel_host, "wake", sub_id)
    cursor = view(kernel_host, "wake")["cursor"]
    replies: list[Response] = []
    reader = threading.Thread(
        target=lambda: replies.append(changes(kernel_host, "wake", cursor, "&wait=30"))
    )
    reader.start()

    submit(kernel_host, "wake", "r2", "second")
    reader.join(40)

    assert not reader.is_alive() and replies[0].status == 200
    records = replies[0].json()["changes"]
    assert records and records[0]["cursor"] == cursor + 1 and records[0]["op"] == "accept"


def test_a_new_session_can_be_followed_from_zero_right_after_its_first_submission(
    kernel_host: HostProcess,
) -> None:
    submit(kernel_host, "fresh", "r1", "hi")

    resp = changes(kernel_host, "fresh", 0, "&wait=25")

    assert resp.status == 200 and resp.json()["changes"][0]["cursor"] == 1


def test_the_whole_log_stays_readable_across_sealed_pages(kernel_host: HostProcess) -> None:
    def tick(i: int) -> None:
        signal(
            kernel_host,
            "expiry",
            "commit",
            {"tasks": [{"id": "clock", "kind": "clock", "phase": f"t{i}"}]},
        )

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(tick, range(1_005)))
    wait_for(
        lambda: (
            kernel_host.get("/api/sessions/expiry").status == 200
            and view(kernel_host, "expiry")["cursor"] == 1_005
        ),
        30,
        "1,005 commits",
    )

    first = changes(kernel_host, "expiry", 0).json()
    rest = changes(kernel_host, "expiry", first["cursor"]).json()
    head = view(kernel_host, "expiry")

    # One answer holds at most 1,000 records; the next one continues from its cursor.
    assert [r["cursor"] for r in first["changes"] + rest["changes"]] == list(range(1, 1_006))
    assert len(first["changes"]) == 1_000 and first["latest"] == 1_005
    assert head["counts"]["sealed"]["changes"] > 900  # the head keeps only a recent tail


# --- delete ---------------------------------------------------------------------------


def test_a_session_is_deleted_with_everything_it_owns_once_idle(kernel_host: HostProcess) -> None:
    sub_id = submit(kernel_host, "gone", "r1", "soon deleted").json()["submissionId"]
    final(kernel_host, "gone", sub_id)
    holder = hold(kernel_host, "gone")
    busy_view = view(kernel_host, "gone")

    busy = kernel_host.request("DELETE", "/api/sessions/gone")

    assert busy.status == 409 and busy.json()["error"] == "session_busy"
    assert view(kernel_host, "gone") == busy_view
    release(kernel_host, "gone", holder)
    owned = instances(kernel_host, "gone:")

    deleted = kernel_host.request("DELETE", "/api/sessions/gone")

    assert deleted.status == 200, deleted.body
    assert deleted.json() == {"sessionId": "gone", "deleted": True, "instancesPurged": len(owned)}
    assert len(owned) >= 2  # the turn and its run
    assert kernel_host.get("/api/sessions/gone").status == 404
    assert kernel_host.get(f"/api/sessions/gone/submissions/{sub_id}").status == 404
    assert instances(kernel_host, "gone:") == []
    assert kernel_host.get(f"{WEBHOOK}/entities/session/gone").status == 404
    assert kernel_host.request("DELETE", "/api/sessions/gone").status == 404
    again = submit(kernel_host, "gone", "r1", "a new life")
    assert again.json()["duplicate"] is False
    assert final(kernel_host, "gone", sub_id)["answer"] == answer("a new life")


# --- bad input ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def known_session(kernel_host: HostProcess) -> str:
    sub_id = submit(kernel_host, "known", "r1", "hi").json()["submissionId"]
    final(kernel_host, "known", sub_id)
    return "known"


def error_of(resp: Response) -> tuple[int, str, str | None]:
    body = resp.json()
    assert set(body) == {"error", "message", "field"}, body
    return resp.status, body["error"], body["field"]


@pytest.mark.parametrize(("raw", "code", "field"), [
    (b"{oops", "invalid_json", "body"),
    (b"[1, 2]", "invalid_body", "body"),
    (b"", "invalid_body", "body"),
    (json.dumps({"text": "hi"}).encode(), "missing_field", "requestId"),
    (json.dumps({"requestId": "r"}).encode(), "missing_field", "text"),
    (json.dumps({"requestId": "", "text": "hi"}).encode(), "invalid_request_id", "requestId"),
    (json.dumps({"requestId": "r" * 129, "text": "hi"}).encode(), "invalid_request_id", "requestId"),
    (json.dumps({"requestId": "r", "text": ""}).encode(), "empty_text", "text"),
    (json.dumps({"requestId": "r", "text": "   "}).encode(), "empty_text", "text"),
    (json.dumps({"requestId": "r", "text": 5}).encode(), "invalid_text", "text"),
    (json.dumps({"requestId": "r", "text": "x" * 32_001}).encode(), "text_too_long", "text"),
    (json.dumps({"requestId": "r", "text": "hi", "extra": 1}).encode(), "unknown_field", "extra"),
    (b"[" + b"0," * 140_000 + b"0]", "body_too_large", "body"),
])  # fmt: skip
def test_a_bad_submission_is_rejected_and_stores_nothing(
    kernel_host: HostProcess, raw: bytes, code: str, field: str
) -> None:
    resp = kernel_host.request("POST", "/api/sessions/bad/submissions", raw=raw)

    assert error_of(resp) == (400, code, field)
    assert kernel_host.get("/api/sessions/bad").status == 404
    assert instances(kernel_host, "bad:") == []


@pytest.mark.parametrize(("method", "path", "expected"), [
    ("POST", "/api/sessions/bad.id/submissions", (400, "invalid_session_id", "sessionId")),
    ("POST", "/api/sessions/" + "x" * 65 + "/submissions", (400, "invalid_session_id", "sessionId")),
    ("GET", "/api/sessions/bad%20id", (400, "invalid_session_id", "sessionId")),
    ("GET", "/api/sessions/nobody", (404, "session_not_found", "sessionId")),
    ("DELETE", "/api/sessions/nobody", (404, "session_not_found", "sessionId")),
    ("DELETE", "/api/sessions/bad.id", (400, "invalid_session_id", "sessionId")),
    ("GET", "/api/sessions/nobody/changes?after=0", (404, "session_not_found", "sessionId")),
    ("GET", "/api/sessions/known/changes", (400, "invalid_cursor", "after")),
    ("GET", "/api/sessions/known/changes?after=-1", (400, "invalid_cursor", "after")),
    ("GET", "/api/sessions/known/changes?after=x", (400, "invalid_cursor", "after")),
    ("GET", "/api/sessions/known/changes?after=100000", (400, "invalid_cursor", "after")),
    ("GET", "/api/sessions/known/changes?after=0&wait=soon", (400, "invalid_wait", "wait")),
    ("GET", "/api/sessions/known/changes?after=0&wait=-2", (400, "invalid_wait", "wait")),
    ("GET", "/api/sessions/known/changes?after=0&limit=0", (400, "invalid_limit", "limit")),
    ("GET", "/api/sessions/known/submissions/not%20an%20id", (400, "invalid_submission_id", "submissionId")),
    ("GET", "/api/sessions/known/submissions/" + "0" * 36, (404, "submission_not_found", "submissionId")),
    ("GET", "/api/sessions/bad.id/page", (400, "invalid_session_id", "sessionId")),
    ("GET", "/api/static/secret.py", (404, "file_not_found", "name")),
])  # fmt: skip
def test_bad_paths_and_queries_are_named(
    known_session: str, kernel_host: HostProcess, method: str, path: str, expected: tuple
) -> None:
    assert error_of(kernel_host.request(method, path)) == expected


def test_a_full_queue_is_a_conflict_and_stores_nothing(kernel_host: HostProcess) -> None:
    hold(kernel_host, "full")
    for i in range(100):
        signal(kernel_host, "full", "accept", {"request_id": f"w{i}", "text": "wait"})
    wait_for(lambda: len(view(kernel_host, "full")["turn_queue"]) == 100, 60, "a full queue")
    before = view(kernel_host, "full")

    resp = submit(kernel_host, "full", "one-too-many", "no room")

    assert error_of(resp) == (409, "queue_full", "requestId")
    assert view(kernel_host, "full") == before and instances(kernel_host, "full:") == []


# --- documents served by the app ------------------------------------------------------


def test_the_openapi_document_and_the_page_are_served(kernel_host: HostProcess) -> None:
    spec = kernel_host.get("/api/openapi.yaml")
    page = kernel_host.get("/api/sessions/known/page")
    script = kernel_host.get("/api/static/session.js")

    assert spec.status == 200 and spec.body == (ROOT / "docs" / "openapi.yaml").read_bytes()
    assert page.status == 200 and page.headers["Content-Type"].startswith("text/html")
    assert b"../../static/session.js" in page.body
    assert script.status == 200 and script.headers["Content-Type"].startswith("text/javascript")
