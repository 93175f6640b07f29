"""A streamed chat completion folds into the reply a plain call returns."""

from __future__ import annotations

import pytest

from adapters.model_provider import StreamAccumulator, StreamCutError, response_from_openai


def chunk(delta: dict, finish: str | None = None, usage: dict | None = None) -> dict:
    return {
        "model": "m1",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]
        if delta or finish
        else [],
        "usage": usage,
    }


def test_text_chunks_fold_into_the_plain_reply_and_report_growth() -> None:
    folded = StreamAccumulator()
    grew = [
        folded.add(chunk({"role": "assistant", "content": ""})),
        folded.add(chunk({"content": "Hel"})),
        folded.add(chunk({"content": "lo."})),
        folded.add(chunk({}, "stop")),
        folded.add(chunk({}, usage={"prompt_tokens": 3, "completion_tokens": 2})),
    ]
    plain = {
        "model": "m1",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Hello."},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2},
    }

    assert grew == [False, True, True, False, False]
    assert response_from_openai(folded.reply(), "x") == response_from_openai(plain, "x")


def test_tool_call_deltas_are_assembled_by_index() -> None:
    folded = StreamAccumulator()
    folded.add(
        chunk(
            {
                "tool_calls": [
                    {"index": 0, "id": "c1", "function": {"name": "calculator", "arguments": ""}}
                ]
            }
        )
    )
    folded.add(chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"expression"'}}]}))
    folded.add(chunk({"tool_calls": [{"index": 0, "function": {"arguments": ': "2+3"}'}}]}))
    folded.add(chunk({}, "tool_calls", {"prompt_tokens": 1, "completion_tokens": 1}))

    response = response_from_openai(folded.reply(), "x")

    assert response.content is None
    assert [(c.id, c.name, c.arguments) for c in response.tool_calls] == [
        ("c1", "calculator", {"expression": "2+3"})
    ]
    assert response.finish_reason == "tool_calls"


def test_a_stream_without_a_finish_reason_is_cut() -> None:
    folded = StreamAccumulator()
    folded.add(chunk({"content": "partial"}))
    with pytest.raises(StreamCutError):
        folded.reply()
