"""The pure parts of the background model provider, and the offline provider on a real store."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from adapters.content_store import FileContentStore
from adapters.model_background import (
    Handle,
    OfflineBackground,
    Polled,
    Submitted,
    polled_from_body,
    polled_from_error,
    responses_input,
    responses_tools,
)
from kernel.turn import tools
from kernel.turn.model_io import ModelRequest, ToolCall


def body(status: str, **extra: object) -> dict[str, object]:
    return {"id": "resp_1", "status": status, "model": "m", **extra}


@pytest.mark.parametrize("status", ["queued", "in_progress"])
def test_pending_statuses_carry_no_response(status: str) -> None:
    assert polled_from_body(body(status), "default") == Polled(status)  # type: ignore[arg-type]


def test_a_completed_body_becomes_the_neutral_response() -> None:
    polled = polled_from_body(
        body(
            "completed",
            output=[
                {"type": "reasoning", "summary": []},
                {"type": "message", "content": [{"type": "output_text", "text": "4+4 = 8"}]},
            ],
            usage={"input_tokens": 12, "output_tokens": 5},
        ),
        "default",
    )

    assert polled.status == "completed" and polled.failure is None
    assert polled.response is not None
    assert (polled.response.content, polled.response.finish_reason) == ("4+4 = 8", "stop")
    assert polled.response.usage.to_dict() == {"prompt_tokens": 12, "completion_tokens": 5}
    assert polled.response.model == "m"


def test_function_calls_become_tool_calls_by_their_call_id() -> None:
    call = {"type": "function_call", "id": "fc_1", "call_id": "call_9", "name": "calculator"}
    polled = polled_from_body(
        body("completed", output=[{**call, "arguments": '{"expression": "2+3"}'}]), "d"
    )

    assert polled.response is not None
    assert polled.response.tool_calls == (ToolCall("call_9", "calculator", {"expression": "2+3"}),)
    assert polled.response.finish_reason == "tool_calls"


def test_an_incomplete_answer_is_kept_with_its_reason() -> None:
    polled = polled_from_body(
        body("incomplete", incomplete_details={"reason": "max_output_tokens"}, output=[]), "d"
    )

    assert polled.status == "completed"
    assert polled.response is not None and polled.response.finish_reason == "max_output_tokens"


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        ("server_error", "transient"),
        ("rate_limit_exceeded", "transient"),
        ("invalid_prompt", "fatal"),
    ],
)
def test_a_failed_request_names_the_providers_error(code: str, kind: str) -> None:
    polled = polled_from_body(body("failed", error={"code": code, "message": "it broke"}), "d")

    assert polled.status == "failed" and polled.failure is not None
    assert polled.failure.kind == kind
    assert polled.failure.message == f"the background model request failed: {code}: it broke"


def test_a_cancelled_request_and_an_unknown_status_end_the_call() -> None:
    cancelled = polled_from_body(body("cancelled"), "d")
    strange = polled_from_body(body("paused"), "d")

    assert cancelled.status == "cancelled" and cancelled.failure is not None
    assert strange.status == "failed" and strange.failure is not None
    assert strange.failure.kind == "fatal" and "'paused'" in strange.failure.message


def test_a_404_fails_the_call_with_the_providers_answer_and_the_rest_polls_again() -> None:
    gone = polled_from_error(404, {}, "model endpoint answered 404: no such response")
    busy = polled_from_error(429, {"Retry-After": "3"}, "slow down")
    down = polled_from_error(503, {}, "down")
    refused = polled_from_error(401, {}, "bad key")

    assert gone.status == "failed" and gone.failure is not None
    assert (gone.failure.kind, gone.failure.message) == (
        "fatal",
        "model endpoint answered 404: no such response",
    )
    assert busy.status == "unknown" and busy.failure is not None and busy.failure.retry_after == 3
    assert down.status == "unknown"
    assert refused.status == "failed"


def test_a_polled_envelope_is_plain_json() -> None:
    failed = polled_from_error(404, {}, "gone").to_dict()
    done = polled_from_body(body("completed", output=[]), "d").to_dict()

    assert failed == {
        "status": "failed",
        "ok": False,
        "kind": "fatal",
        "message": "gone",
        "retry_after": None,
    }
    assert done["status"] == "completed" and done["ok"] is True and "response" in done


def test_chat_messages_become_responses_input_items_in_order() -> None:
    request = ModelRequest.from_entries(
        [
            {"n": 1, "role": "user", "text": "calculate 2+3"},
            {
                "n": 2,
                "role": "assistant",
                "text": None,
                "data": {"tool_calls": [{"id": "c1", "name": "calculator", "arguments": {"a": 1}}]},
            },
            {"n": 3, "role": "tool", "text": "5", "data": {"tool_call_id": "c1"}},
        ]
    )

    assert responses_input(request.messages) == [
        {"role": "user", "content": "calculate 2+3"},
        {"type": "function_call", "call_id": "c1", "name": "calculator", "arguments": '{"a": 1}'},
        {"type": "function_call_output", "call_id": "c1", "output": "5"},
    ]


def test_tool_specs_take_the_flat_responses_form() -> None:
    flat = responses_tools(tools.openai_tool_specs())

    assert all(t["type"] == "function" and "function" not in t for t in flat)
    names = [s["function"]["name"] for s in tools.openai_tool_specs()]  # type: ignore[index,call-overload]
    assert [t["name"] for t in flat] == names
    assert all("parameters" in t for t in flat)


def test_the_offline_provider_answers_through_a_durable_handle(tmp_path: Path) -> None:
    provider = OfflineBackground(FileContentStore(tmp_path))
    request = ModelRequest.from_entries([{"n": 1, "role": "user", "text": "what is 2+2"}])

    async def run() -> tuple[Polled, Polled, Polled]:
        submitted = await provider.submit(request, 5)
        assert isinstance(submitted, Submitted)
        handle = submitted.handle
        again = OfflineBackground(FileContentStore(tmp_path))  # another process, same store
        return (
            await again.poll(handle, 5),
            await again.cancel(handle, 5),
            await again.poll(Handle("offline", "offline:sha256:" + "0" * 64), 5),
        )

    polled, cancelled, unknown = asyncio.run(run())

    assert polled.status == "completed" and polled.response is not None
    assert polled.response.tool_calls[0].name == "calculator"
    assert cancelled.status == "completed"  # answered at submit: nothing left to stop
    assert unknown.status == "failed" and unknown.failure is not None
    assert "knows no request" in unknown.failure.message
