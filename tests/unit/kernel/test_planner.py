"""The offline planner: one rule per request shape, one round per clause, a final summary."""

from __future__ import annotations

import copy

import pytest

from kernel.turn import planner, tools
from kernel.turn.model_io import JsonObject, ModelResponse, ToolCall

Entry = dict[str, object]


def _user(n: int, text: str) -> Entry:
    return {"n": n, "role": "user", "kind": "message", "text": text, "data": {}}


def _assistant(n: int, response: ModelResponse) -> Entry:
    calls = [call.to_dict() for call in response.tool_calls]
    return {
        "n": n,
        "role": "assistant",
        "kind": "message",
        "text": response.content,
        "data": {"tool_calls": calls},
    }


def _tool(n: int, call: ToolCall, text: str | None, **data: object) -> Entry:
    return {
        "n": n,
        "role": "tool",
        "kind": "tool_result",
        "text": text,
        "data": {"tool_call_id": call.id, **data},
    }


def _only_call(response: ModelResponse) -> ToolCall:
    assert response.finish_reason == "tool_calls"
    assert response.content is None
    assert len(response.tool_calls) == 1
    return response.tool_calls[0]


def _run_turn(text: str, results: list[tuple[str | None, JsonObject]]) -> list[Entry]:
    """Play a turn: answer each planned call with the next canned result, in order."""
    entries = [_user(1, text)]
    for result_text, data in results:
        response = planner.plan(entries)
        entries.append(_assistant(len(entries) + 1, response))
        entries.append(_tool(len(entries) + 1, _only_call(response), result_text, **data))
    return entries


NOTICE = 'send the approved notice to a@x.com, b@y.com and c@z.com subject "Q3 update"'


@pytest.mark.parametrize(
    ("text", "name", "arguments"),
    [
        ("calculate (2 + 3) * 4", "calculator", {"expression": "(2 + 3) * 4"}),
        ("Compute 7 // 2.", "calculator", {"expression": "7 // 2"}),
        ("What is 2 + 2?", "calculator", {"expression": "2 + 2"}),
        ("what's 10 % 3", "calculator", {"expression": "10 % 3"}),
        (
            "remember shopping: eggs, milk",
            "write_document",
            {"title": "shopping", "text": "eggs, milk"},
        ),
        (
            'Remember "trip plan" : fly Tuesday',
            "write_document",
            {"title": "trip plan", "text": "fly Tuesday"},
        ),
        ("recall shopping", "read_document", {"title": "shopping"}),
        ("delete document 'old plan'", "delete_document", {"title": "old plan"}),
        ("delete the document drafts", "delete_document", {"title": "drafts"}),
        ("record paid 5 EUR to Bob in the ledger", "append_ledger", {"text": "paid 5 EUR to Bob"}),
        ("Ledger: paid 5 EUR", "append_ledger", {"text": "paid 5 EUR"}),
        (
            NOTICE,
            "send_notices",
            {
                "recipients": ["a@x.com", "b@y.com", "c@z.com"],
                "subject": "Q3 update",
                "body": planner.DEFAULT_BODY,
                "policy": "allSettled",
            },
        ),
        (
            'Send it to a@x.com, fail fast, body "Hi there" cc B@y.com',
            "send_notices",
            {
                "recipients": ["a@x.com", "B@y.com"],
                "subject": planner.DEFAULT_SUBJECT,
                "body": "Hi there",
                "policy": "failFast",
            },
        ),
    ],
)
def test_each_rule_plans_its_tool_call(text: str, name: str, arguments: JsonObject) -> None:
    call = _only_call(planner.plan([_user(4, text)]))

    assert (call.id, call.name, call.arguments) == ("call_4_1_0", name, arguments)


def test_every_planned_call_passes_the_tools_validation() -> None:
    texts = ["calculate 1+1", "remember a: b", "recall a", "delete document a", "ledger: x", NOTICE]

    for text in texts:
        call = _only_call(planner.plan([_user(1, text)]))
        ok, detail = tools.validate_call(call.name, call.arguments)
        assert ok, detail


def test_an_address_inside_a_quoted_subject_is_not_a_recipient() -> None:
    call = _only_call(planner.plan([_user(1, 'send to a@x.com subject "re: b@y.com"')]))

    assert call.arguments["recipients"] == ["a@x.com"]


def test_duplicate_addresses_are_kept_for_the_tool_to_reject() -> None:
    call = _only_call(planner.plan([_user(1, "send the notice to a@x.com and A@x.com")]))

    assert call.arguments["recipients"] == ["a@x.com", "A@x.com"]
    assert not tools.validate_call(call.name, call.arguments)[0]


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("hello there", 'You said: "hello there" (2 words).'),
        ("Hi!", 'You said: "Hi" (1 word).'),
        ("what is love?", 'You said: "what is love" (3 words).'),
        ("remember to buy milk", 'You said: "remember to buy milk" (4 words).'),
        ("send a postcard to grandma", 'You said: "send a postcard to grandma" (5 words).'),
    ],
)
def test_anything_else_is_answered_directly(text: str, answer: str) -> None:
    response = planner.plan([_user(1, text)])

    assert response.tool_calls == ()
    assert response.finish_reason == "stop"
    assert response.content == answer


def test_without_a_user_entry_there_is_nothing_to_answer() -> None:
    response = planner.plan([])

    assert response.tool_calls == ()
    assert response.content == "There is no question to answer yet."


def test_the_same_entries_give_an_equal_response() -> None:
    entries = _run_turn(f"calculate 1 + 1 and then {NOTICE}", [("2", {})])

    assert planner.plan(entries) == planner.plan(copy.deepcopy(entries))


def test_ids_use_the_entry_position_when_the_user_entry_has_no_number() -> None:
    entries: list[Entry] = [
        {"role": "system", "text": "Be brief."},
        {"role": "user", "text": "recall a"},
    ]

    assert _only_call(planner.plan(entries)).id == "call_1_1_0"


def test_clauses_are_planned_one_round_each_in_order() -> None:
    text = "calculate 6 * 7 and then remember answer: 42 AND THEN ledger: answered"
    entries = [_user(1, text)]
    seen: list[tuple[str, str]] = []

    for result in ('{"value": 42}', "saved", "appended"):
        response = planner.plan(entries)
        call = _only_call(response)
        seen.append((call.id, call.name))
        entries += [_assistant(len(entries) + 1, response), _tool(len(entries) + 2, call, result)]

    assert seen == [
        ("call_1_1_0", "calculator"),
        ("call_1_2_0", "write_document"),
        ("call_1_3_0", "append_ledger"),
    ]
    final = planner.plan(entries)
    assert final.finish_reason == "stop"
    assert final.content == '6 * 7 = 42\nSaved note "answer".\nRecorded in the ledger: answered'


def test_the_final_answer_summarises_each_clause_including_direct_ones() -> None:
    entries = _run_turn(
        "hello and then recall shopping and then delete document old",
        [(None, {"result": {"text": "eggs"}}), ("deleted", {})],
    )

    assert planner.plan(entries).content == (
        'You said: "hello" (1 word).\nNote "shopping": eggs\nDeleted document "old".'
    )


def test_the_notice_summary_has_one_line_per_recipient_with_its_outcome() -> None:
    outcome: JsonObject = {
        "results": [
            {"recipient": "a@x.com", "outcome": "sent"},
            {"recipient": "B@Y.com", "outcome": "failed", "detail": "mailbox full"},
        ]
    }

    entries = _run_turn(NOTICE, [(None, {"result": outcome})])

    assert planner.plan(entries).content == "\n".join(
        [
            'Notice "Q3 update" to 3 recipient(s):',
            "- a@x.com: sent",
            "- b@y.com: failed (mailbox full)",
            "- c@z.com: no outcome reported",
        ]
    )


def test_a_failed_tool_result_is_reported_not_retried() -> None:
    failure = '{"ok": false, "kind": "invalid_arguments", "message": "recipients: duplicate"}'

    entries = _run_turn("calculate 1/0 and then recall a", [(failure, {}), ("x", {"ok": False})])

    final = planner.plan(entries)
    assert final.tool_calls == ()
    assert final.content == (
        "calculator did not complete (invalid_arguments): recipients: duplicate\n"
        "read_document did not complete (error): x"
    )


def test_a_calculator_result_given_as_a_number_is_formatted() -> None:
    entries = _run_turn("calculate 4 / 2", [(None, {"result": 2.0})])

    assert planner.plan(entries).content == "4 / 2 = 2"


def test_only_results_after_the_latest_user_entry_count() -> None:
    first_turn = _run_turn("recall a", [("alpha", {})])
    first_turn.append({"n": 4, "role": "assistant", "text": planner.plan(first_turn).content})

    second = planner.plan([*first_turn, _user(5, "recall a")])

    assert _only_call(second).id == "call_5_1_0"


def test_results_for_unplanned_calls_are_ignored() -> None:
    stray = ToolCall("call_other", "calculator", {})
    entries = [_user(1, "recall a"), _tool(2, stray, "noise")]

    assert _only_call(planner.plan(entries)).id == "call_1_1_0"


def test_usage_is_a_word_based_estimate() -> None:
    entries = [{"role": "system", "text": "one two three"}, _user(2, "hello there friend")]

    response = planner.plan(entries)

    assert planner.estimate_tokens("one two three") == 4
    assert response.usage.prompt_tokens == 8
    assert response.usage.completion_tokens == planner.estimate_tokens(response.content or "")
    assert response.model == planner.MODEL_NAME


def test_partly_failed_notices_still_list_every_recipient():
    from kernel.turn import planner

    user = {
        "n": 1,
        "role": "user",
        "kind": "message",
        "text": "send the approved notice to a@x.com, b@x.com",
    }
    call = planner.plan([user]).tool_calls[0]
    result = {
        "ok": False,
        "kind": "settled",
        "message": "1 of 2 confirmed; 1 rejected",
        "results": [
            {"recipient": "a@x.com", "outcome": "confirmed"},
            {"recipient": "b@x.com", "outcome": "rejected", "detail": "recipient_rejected"},
        ],
    }
    tool = {
        "n": 3,
        "role": "tool",
        "kind": "message",
        "text": None,
        "data": {"tool_call_id": call.id, "result": result},
    }
    assistant = {
        "n": 2,
        "role": "assistant",
        "kind": "message",
        "text": None,
        "data": {"tool_calls": [call.to_dict()]},
    }

    answer = planner.plan([user, assistant, tool]).content

    assert "did not complete (settled)" in answer
    assert "- a@x.com: confirmed" in answer
    assert "- b@x.com: rejected (recipient_rejected)" in answer
