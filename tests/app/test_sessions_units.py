"""Pure parts of the sessions feature: HTTP input parsing, the session entity's decisions, the
turn's outcome mapping, and the OpenAPI document against the routes the app serves."""

from __future__ import annotations

import json
import re
from pathlib import Path

import azure.durable_functions as df
import azure.functions as func
import pytest

from api import approval_links, inputs, loops, operator, pages, purge, sessions
from api import skills as skill_routes
from api import workspace as workspace_routes
from entities.session import handle
from kernel.common import content
from kernel.common.errors import ConflictError, ValidationError
from kernel.session import reducer as core
from orchestrators.agent_turn import accept_request, clip_inline, finish_commit, finish_status
from tests.harness import kernel_function_app

NOW = "2026-01-01T00:00:00Z"
ROOT = Path(__file__).resolve().parents[2]


def body(value: object) -> bytes:
    return json.dumps(value).encode()


# --- submission bodies ----------------------------------------------------------------


def test_a_valid_submission_is_parsed() -> None:
    parsed = inputs.submission(body({"requestId": "r-1", "text": "hello"}))
    assert (parsed.request_id, parsed.text) == ("r-1", "hello")


@pytest.mark.parametrize(("raw", "code", "field"), [
    (b"{not json", "invalid_json", "body"),
    (b"\xff\xfe", "invalid_json", "body"),
    (b"", "invalid_body", "body"),
    (b"[]", "invalid_body", "body"),
    (b'"text"', "invalid_body", "body"),
    (b"null", "invalid_body", "body"),
    (body({"text": "hi"}), "missing_field", "requestId"),
    (body({"requestId": "r", "text": None}), "missing_field", "text"),
    (body({"requestId": "", "text": "hi"}), "invalid_request_id", "requestId"),
    (body({"requestId": 7, "text": "hi"}), "invalid_request_id", "requestId"),
    (body({"requestId": "x" * 129, "text": "hi"}), "invalid_request_id", "requestId"),
    (body({"requestId": "a\nb", "text": "hi"}), "invalid_request_id", "requestId"),
    (body({"requestId": "r", "text": ""}), "empty_text", "text"),
    (body({"requestId": "r", "text": " \n\t"}), "empty_text", "text"),
    (body({"requestId": "r", "text": ["hi"]}), "invalid_text", "text"),
    (body({"requestId": "r", "text": "x" * 32_001}), "text_too_long", "text"),
    (body({"requestId": "r", "text": "hi", "requestID": "r"}), "unknown_field", "requestID"),
    (b" " * (inputs.MAX_BODY_BYTES + 1), "body_too_large", "body"),
])  # fmt: skip
def test_a_bad_submission_names_its_field(raw: bytes, code: str, field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        inputs.submission(raw)
    assert (caught.value.code, caught.value.field, caught.value.http_status) == (code, field, 400)


def test_the_longest_text_is_accepted() -> None:
    assert len(inputs.submission(body({"requestId": "r", "text": "é" * 32_000})).text) == 32_000


@pytest.mark.parametrize("value", ["", "a.b", "a b", "x" * 65, "a:b", None])
def test_session_ids_are_checked(value: object) -> None:
    with pytest.raises(ValidationError) as caught:
        inputs.session_id(value)
    assert (caught.value.code, caught.value.field) == ("invalid_session_id", "sessionId")


def test_submission_ids_are_checked() -> None:
    with pytest.raises(ValidationError) as caught:
        inputs.submission_id("not a key")
    assert (caught.value.code, caught.value.field) == ("invalid_submission_id", "submissionId")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ('{"phase": "approval"}', {"phase": "approval"}),
        ({"phase": "approval"}, {"phase": "approval"}),
        ("not json", {}),
        ("[1, 2]", {}),
        (None, {}),
        (7, {}),
    ],
)
def test_an_instance_status_field_reads_as_an_object(value: object, expected: object) -> None:
    assert inputs.status_object(value) == expected


# --- change queries -------------------------------------------------------------------


def test_a_change_query_has_defaults_and_caps_the_wait() -> None:
    assert inputs.changes_query({"after": "0"}) == inputs.ChangesQuery(0, 0.0, None)
    assert inputs.changes_query(
        {"after": "12", "wait": "2.5", "limit": "3"}
    ) == inputs.ChangesQuery(12, 2.5, 3)
    assert inputs.changes_query({"after": "1", "wait": "3600"}).wait == inputs.MAX_WAIT_SECONDS


@pytest.mark.parametrize(("params", "code", "field"), [
    ({}, "invalid_cursor", "after"),
    ({"after": ""}, "invalid_cursor", "after"),
    ({"after": "-1"}, "invalid_cursor", "after"),
    ({"after": "1.5"}, "invalid_cursor", "after"),
    ({"after": "abc"}, "invalid_cursor", "after"),
    ({"after": "1", "wait": "soon"}, "invalid_wait", "wait"),
    ({"after": "1", "wait": "-1"}, "invalid_wait", "wait"),
    ({"after": "1", "wait": "nan"}, "invalid_wait", "wait"),
    ({"after": "1", "wait": "inf"}, "invalid_wait", "wait"),
    ({"after": "1", "limit": "0"}, "invalid_limit", "limit"),
    ({"after": "1", "limit": "1001"}, "invalid_limit", "limit"),
    ({"after": "1", "limit": "x"}, "invalid_limit", "limit"),
])  # fmt: skip
def test_a_bad_change_query_names_its_field(params: dict[str, str], code: str, field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        inputs.changes_query(params)
    assert (caught.value.code, caught.value.field) == (code, field)


# --- the session entity ---------------------------------------------------------------


def accepted(session_id: str = "s", request_id: str = "r") -> dict:
    state, _ = core.apply(
        core.new_state(session_id, NOW), "accept", {"request_id": request_id, "text": "hi"}, NOW
    )
    return state


def test_a_read_of_an_absent_session_does_not_create_it() -> None:
    outcome = handle(None, "s", "view", None, NOW)
    assert outcome.state is None and outcome.envelope["ok"] and not outcome.delete


def test_a_failed_operation_changes_nothing() -> None:
    outcome = handle(None, "s", "finish", {"submission_id": "nope", "status": "failed"}, NOW)
    assert outcome.state is None
    assert outcome.envelope == {
        "ok": False,
        "status": 404,
        "error": {
            "error": "submission_not_found",
            "message": "no submission 'nope'",
            "field": "submission_id",
        },
    }


def test_an_idle_session_at_the_expected_cursor_is_deleted() -> None:
    state = accepted()
    sub_id = state["active_submission"]
    state, _ = core.apply(state, "finish", {"submission_id": sub_id, "status": "completed"}, NOW)
    outcome = handle(state, "s", "delete", {"cursor": state["cursor"]}, NOW)
    assert outcome.delete and outcome.state is None
    assert outcome.envelope == {"ok": True, "result": {"deleted": True, "cursor": state["cursor"]}}


@pytest.mark.parametrize(("request_", "code", "status"), [
    ({"cursor": 1}, "session_busy", 409),
    ({"cursor": 0}, "session_changed", 409),
    ([1], "invalid_request", 400),
])  # fmt: skip
def test_a_busy_or_changed_session_is_not_deleted(request_: object, code: str, status: int) -> None:
    outcome = handle(accepted(), "s", "delete", request_, NOW)
    assert not outcome.delete and outcome.state is None
    assert (outcome.envelope["error"]["error"], outcome.envelope["status"]) == (code, status)


def test_deleting_an_absent_session_is_not_found() -> None:
    outcome = handle(None, "s", "delete", {}, NOW)
    assert not outcome.delete and outcome.envelope["status"] == 404


def test_accept_by_reference_reads_the_stored_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENT_CONTENT_DIR", str(tmp_path))
    from adapters.content_store import default_store

    text = "long " * 2_000
    ref = default_store().put(text)
    outcome = handle(None, "s", "accept", {"request_id": "r", "text_ref": ref}, NOW)
    assert outcome.envelope["ok"], outcome.envelope
    assert outcome.state is not None and outcome.state["entries"][0]["content_ref"] == ref
    assert outcome.state["entries"][0]["text"] is None

    missing = handle(
        None, "s", "accept", {"request_id": "r", "text_ref": content.content_ref("other")}, NOW
    )
    assert missing.envelope["error"]["error"] == "content_not_found" and missing.state is None


def test_a_session_owns_its_turns_and_the_tasks_of_its_submissions() -> None:
    state = accepted("s", "r")
    sub_id = state["active_submission"]
    assert purge.owned_prefixes("s", state) == ["s:", f"{sub_id}:"]
    assert purge.owned_prefixes("s", None) == ["s:"]


def test_a_full_queue_refuses_before_anything_is_stored() -> None:
    state = accepted()
    sessions.check_room(state)
    with pytest.raises(ConflictError) as caught:
        sessions.check_room({**state, "turn_queue": ["x"] * 100})
    assert (caught.value.code, caught.value.field, caught.value.http_status) == (
        "queue_full",
        "requestId",
        409,
    )


# --- the turn's pure helpers ----------------------------------------------------------


def test_the_accept_request_carries_the_text_or_its_reference() -> None:
    job = {
        "session_id": "s",
        "request_id": "r",
        "submission_id": "id",
        "text_ref": "sha256:" + "0" * 64,
    }
    assert accept_request(job) == {
        "request_id": "r",
        "submission_id": "id",
        "text_ref": job["text_ref"],
    }


@pytest.mark.parametrize(("outcome", "expected"), [
    ({"status": "completed", "answer": "42"}, ("completed", "42", None)),
    ({"status": "failed", "answer": None, "reason": "max_rounds"}, ("failed", None, "max_rounds")),
    ({"status": "cancelled", "reason": "user"}, ("cancelled", None, "user")),
    ({"status": "needs_attention", "reason": "approval"}, ("failed", None, "approval")),
    ({"status": "needs_attention"}, ("failed", None, "needs attention")),
    ({"status": "weird"}, ("failed", None, "the run ended with status 'weird'")),
    (None, ("failed", None, "the run returned no outcome")),
])  # fmt: skip
def test_every_run_outcome_finishes_the_submission(outcome: object, expected: tuple) -> None:
    assert finish_status(outcome) == expected


def test_a_long_answer_is_clipped_to_the_inline_limit_on_a_character_boundary() -> None:
    clipped = clip_inline("é" * 5_000)
    assert clipped is not None and clipped.endswith("…")
    assert len(clipped.encode("utf-8")) <= content.REFERENCE_THRESHOLD_BYTES
    assert clip_inline("short") == "short" and clip_inline(None) is None and clip_inline("") is None


def test_the_finishing_commit_is_accepted_by_the_session() -> None:
    state = accepted()
    sub_id = state["active_submission"]
    turn_id = state["submissions"][sub_id]["turn_instance_id"]
    job = {"submission_id": sub_id}
    request = finish_commit(job, turn_id, "failed", "é" * 5_000, "r" * 2_000)
    new, result = core.apply(state, "commit", request, NOW)
    assert new["submissions"][sub_id]["status"] == "failed"
    assert len(new["tasks"][turn_id]["reason"]) == 1_000
    assert result["next_submission_id"] is None


# --- the OpenAPI document -------------------------------------------------------------


def served_routes() -> set[tuple[str, str]]:
    app = df.DFApp(http_auth_level=func.AuthLevel.ANONYMOUS)
    for blueprint in (
        sessions.bp, pages.bp, operator.bp, approval_links.bp, loops.bp, skill_routes.bp,
        workspace_routes.bp,
    ):  # fmt: skip
        app.register_functions(blueprint)
    routes = set()
    for function in app.get_functions():
        trigger = function.get_trigger()
        for method in getattr(trigger, "methods", None) or []:  # a timer has none
            routes.add(
                (
                    str(method.value if hasattr(method, "value") else method).lower(),
                    "/" + trigger.route.replace("{*", "{"),  # a catch-all is a path parameter
                )
            )
    return routes


def documented_routes(text: str) -> set[tuple[str, str]]:
    routes, path = set(), None
    for line in text.splitlines():
        if match := re.match(r"^  (/\S*):\s*$", line):
            path = match.group(1)
        elif (match := re.match(r"^    (get|post|put|delete|patch):\s*$", line)) and path:
            routes.add((match.group(1), path))
        elif line and not line.startswith(" "):
            path = None
    return routes


def test_the_openapi_document_describes_every_route_the_api_serves() -> None:
    text = (ROOT / "docs" / "openapi.yaml").read_text()
    assert text.startswith("openapi: 3.")
    assert served_routes() == documented_routes(text)


def test_a_deeply_nested_body_is_a_named_400_not_a_recursion_error():
    from api import inputs
    from kernel.common.errors import ValidationError

    deep = b'{"requestId": "r1", "text": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"

    for parse in (inputs.json_object, lambda raw: inputs.decision(raw, "decision", ("approve",))):
        with pytest.raises(ValidationError) as caught:
            parse(deep)
        assert caught.value.code == "invalid_json"
        assert "deeper than 64" in caught.value.message


def test_every_route_declares_the_level_docs_security_md_gives_it() -> None:
    levels = {}
    for function in kernel_function_app().app.get_functions():
        trigger = function.get_trigger()
        if getattr(trigger, "route", None) is not None:
            level = trigger.auth_level
            levels[trigger.route] = str(getattr(level, "value", level)).lower()
    admin = {"sessions/{sessionId}/submissions/{submissionId}/operator",
             "sessions/{sessionId}/approvals/{toolTaskId}",
             "sessions/{sessionId}/tools/{toolTaskId}/operator",
             "skills/{name}/runs/{runId}/approvals/{stepId}"}  # fmt: skip
    anonymous = {"approvals/{toolTaskId}", "static/{name}", "openapi.yaml"}

    assert {route for route, level in levels.items() if level == "admin"} == admin
    assert {route for route, level in levels.items() if level == "anonymous"} == anonymous
    assert {level for route, level in levels.items() if route not in admin | anonymous} == {
        "function"
    }
