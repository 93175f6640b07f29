"""The offline planner's ``call <tool> with <JSON object>`` rule."""

from __future__ import annotations

from kernel.turn import planner


def user(text: str) -> dict[str, object]:
    return {"n": 1, "role": "user", "text": text}


def test_any_tool_name_is_called_with_the_object() -> None:
    response = planner.plan(
        [user('call mcp__git__git_log with {"repo_path": "/r", "max_count": 2}')]
    )

    [call] = response.tool_calls
    assert (call.name, call.arguments) == ("mcp__git__git_log", {"repo_path": "/r", "max_count": 2})


def test_a_built_in_tool_is_answered_as_usual() -> None:
    entries = [
        user('call calculator with {"expression": "2*3"}'),
        {
            "role": "tool",
            "data": {"tool_call_id": "call_1_1_0", "result": {"ok": True, "value": 6}},
        },
    ]

    assert planner.plan(entries).content == "2*3 = 6"


def test_another_tool_s_answer_is_its_text_content() -> None:
    result = {"ok": True, "content": [{"type": "text", "text": "a\n b"}]}
    entries = [
        user("call mcp__x__y with {}"),
        {"role": "tool", "data": {"tool_call_id": "call_1_1_0", "result": result}},
    ]

    assert planner.plan(entries).content == "mcp__x__y: a b"


def test_text_that_is_not_a_json_object_is_no_call() -> None:
    assert planner.plan([user("call x with [1]")]).tool_calls == ()
    assert planner.plan([user("call x with {nope}")]).tool_calls == ()
