"""Model shapes round-trip through JSON, and session entries become chat messages."""

from __future__ import annotations

import json
import re

import pytest

from kernel.turn.model_io import (
    ModelFailure,
    ModelIOError,
    ModelRequest,
    ModelResponse,
    ModelSuccess,
    ToolCall,
    Usage,
    messages_from_entries,
    result_from_dict,
)

CALL = ToolCall("call_1_1_0", "calculator", {"expression": "2 + 2"})
RESPONSE = ModelResponse(
    content=None,
    tool_calls=(CALL,),
    usage=Usage(prompt_tokens=12, completion_tokens=3),
    finish_reason="tool_calls",
    model="offline-planner",
)


def _through_json(value: object) -> object:
    return json.loads(json.dumps(value))


def test_responses_round_trip_through_json() -> None:
    assert ModelResponse.from_dict(_through_json(RESPONSE.to_dict())) == RESPONSE


def test_requests_round_trip_through_json() -> None:
    request = ModelRequest(
        messages=({"role": "user", "content": "hi"},),
        tools=({"type": "function", "function": {"name": "calculator"}},),
        model="gpt-test",
    )

    assert ModelRequest.from_dict(_through_json(request.to_dict())) == request


@pytest.mark.parametrize(
    "result",
    [
        ModelSuccess(RESPONSE),
        ModelFailure(kind="rate_limited", message="slow down", retry_after=7.5),
        ModelFailure(kind="transient", message="502 from the gateway"),
        ModelFailure(kind="fatal", message="401: bad key"),
        ModelFailure(kind="timeout", message="no answer in 60 s"),
    ],
)
def test_result_envelopes_round_trip_through_json(result: ModelSuccess | ModelFailure) -> None:
    assert result_from_dict(_through_json(result.to_dict())) == result


def test_envelopes_have_the_documented_shape() -> None:
    assert ModelSuccess(RESPONSE).to_dict() == {"ok": True, "response": RESPONSE.to_dict()}
    assert ModelFailure(kind="fatal", message="no").to_dict() == {
        "ok": False,
        "kind": "fatal",
        "message": "no",
        "retry_after": None,
    }


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        ([], "result must be an object"),
        ({"ok": "yes"}, "result.ok"),
        ({"ok": False, "kind": "boom", "message": "m"}, "result.kind"),
        ({"ok": False, "kind": "fatal"}, "result.message"),
        ({"ok": False, "kind": "rate_limited", "message": "m", "retry_after": -1}, "retry_after"),
        ({"ok": False, "kind": "rate_limited", "message": "m", "retry_after": True}, "retry_after"),
        ({"ok": True, "response": {"content": 3}}, "response.content"),
        ({"ok": True, "response": {"content": None, "tool_calls": {}}}, "response.tool_calls"),
        ({"ok": True, "response": {"content": "", "usage": {"prompt_tokens": -1}}}, "usage"),
    ],
)
def test_malformed_envelopes_name_the_field(raw: object, fragment: str) -> None:
    with pytest.raises(ModelIOError, match=re.escape(fragment)):
        result_from_dict(raw)


def test_usage_totals_and_defaults() -> None:
    assert Usage(3, 4).total_tokens == 7
    assert Usage.from_dict({}) == Usage(0, 0)


def test_tool_calls_take_the_openai_form_with_string_arguments() -> None:
    call = ToolCall("c1", "write_document", {"title": "t", "text": "ü"})

    assert call.to_openai() == {
        "id": "c1",
        "type": "function",
        "function": {"name": "write_document", "arguments": '{"text": "ü", "title": "t"}'},
    }


def test_tool_call_arguments_must_be_json() -> None:
    with pytest.raises(ModelIOError, match=re.escape("tool_call.arguments.to")):
        ToolCall.from_dict({"id": "c", "name": "n", "arguments": {"to": {1, 2}}})


def _entry(n: int, role: str, text: object, **data: object) -> dict[str, object]:
    return {"n": n, "role": role, "kind": "message", "text": text, "data": data}


def test_entries_become_chat_messages_in_order() -> None:
    entries = [
        _entry(1, "system", "Be brief."),
        _entry(2, "user", "What is 2 + 2?"),
        _entry(3, "assistant", None, tool_calls=[CALL.to_dict()]),
        _entry(4, "tool", "4", tool_call_id="call_1_1_0"),
        _entry(5, "assistant", "2 + 2 = 4"),
    ]

    assert messages_from_entries(entries) == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is 2 + 2?"},
        {"role": "assistant", "content": None, "tool_calls": [CALL.to_openai()]},
        {"role": "tool", "tool_call_id": "call_1_1_0", "content": "4"},
        {"role": "assistant", "content": "2 + 2 = 4"},
    ]


def test_a_tool_result_committed_as_data_is_sent_as_json() -> None:
    entry = _entry(4, "tool", None, tool_call_id="c", result={"value": 4})

    assert messages_from_entries([entry]) == [
        {"role": "tool", "tool_call_id": "c", "content": '{"value": 4}'}
    ]


def test_entries_without_data_are_accepted() -> None:
    assert messages_from_entries([{"n": 1, "role": "user", "text": "hi"}]) == [
        {"role": "user", "content": "hi"}
    ]


@pytest.mark.parametrize(
    ("entry", "fragment"),
    [
        (_entry(7, "robot", "beep"), "entry 7.role"),
        (_entry(7, "tool", "4"), "entry 7.data.tool_call_id"),
        (_entry(7, "user", 42), "entry 7.text"),
        (_entry(7, "assistant", None, tool_calls=[{"id": "c"}]), "tool_call.name"),
        ({"n": 7, "role": "user", "text": None, "content_ref": "sha256:00"}, "entry 7.content_ref"),
        ({"n": 7, "role": "user", "text": "x", "data": [1]}, "entry 7.data"),
    ],
)
def test_malformed_entries_name_the_field(entry: dict[str, object], fragment: str) -> None:
    with pytest.raises(ModelIOError, match=re.escape(fragment)):
        messages_from_entries([entry])


def test_a_request_is_built_from_entries_and_tool_specs() -> None:
    tool_spec = {"type": "function", "function": {"name": "calculator"}}

    request = ModelRequest.from_entries([_entry(1, "user", "hi")], [tool_spec], model="m")

    assert request.messages == ({"role": "user", "content": "hi"},)
    assert request.tools == (tool_spec,)
    assert request.model == "m"
