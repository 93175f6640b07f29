"""The tool catalogue: policies, validation that names the field, and the OpenAI tool specs."""

from __future__ import annotations

import json
from typing import Any, cast

import pytest

from kernel.turn import tools
from kernel.turn.tools import ToolError, ToolSpec

NOTICE = {"recipients": ["a@x.com", "b@y.com"], "subject": "Q3", "body": "Hello."}


def test_the_catalogue_declares_each_tools_policy_and_approval() -> None:
    table = {name: (s.policy, s.requires_approval) for name, s in tools.TOOLS.items()}

    assert table == {
        "calculator": ("safe", False),
        "read_document": ("safe", False),
        "write_document": ("safe", False),
        "delete_document": ("safe", True),
        "append_ledger": ("unsafe", False),
        "send_notices": ("unsafe", False),
        "register_skill": ("safe", True),
        "list_files": ("safe", False),
        "read_file": ("safe", False),
        "write_file": ("safe", False),
        "edit_file": ("safe", False),
        "delete_file": ("safe", False),
        "run_python": ("safe", False),
    }


def test_resolve_returns_the_spec() -> None:
    spec = tools.resolve("calculator")

    assert isinstance(spec, ToolSpec)
    assert spec.args_model is tools.CalculatorArgs


def test_an_unknown_tool_is_an_error_value_naming_the_known_ones() -> None:
    error = tools.resolve("rm_rf")

    assert isinstance(error, ToolError)
    assert error.kind == "unknown_tool"
    assert error.field == "name"
    assert "send_notices" in error.message


def test_validating_an_unknown_tool_returns_the_error_envelope() -> None:
    ok, error = tools.validate_call("rm_rf", {})

    assert not ok
    assert error["ok"] is False
    assert error["kind"] == "unknown_tool"
    assert error["tool"] == "rm_rf"


def test_valid_arguments_come_back_canonical_with_defaults() -> None:
    ok, final = tools.validate_call(
        "send_notices", {**NOTICE, "recipients": [" a@x.com ", "b@y.com"], "subject": " Q3 "}
    )

    assert ok
    assert final == {**NOTICE, "policy": "allSettled"}


@pytest.mark.parametrize(
    ("name", "arguments", "field"),
    [
        ("calculator", {}, "expression"),
        ("calculator", {"expression": 7}, "expression"),
        ("calculator", {"expression": "1 +"}, "expression"),
        ("calculator", {"expression": "1", "precision": 2}, "precision"),
        ("calculator", ["1 + 1"], "arguments"),
        ("read_document", {"title": ""}, "title"),
        ("write_document", {"title": "t"}, "text"),
        ("write_document", {"title": "t" * 201, "text": ""}, "title"),
        ("delete_document", {"title": None}, "title"),
        ("append_ledger", {"text": "   "}, "text"),
        ("send_notices", {**NOTICE, "recipients": []}, "recipients"),
        ("send_notices", {**NOTICE, "recipients": ["a@x.com", "nope"]}, "recipients[1]"),
        (
            "send_notices",
            {**NOTICE, "recipients": [f"u{i}@x.com" for i in range(51)]},
            "recipients",
        ),
        ("send_notices", {**NOTICE, "subject": ""}, "subject"),
        ("send_notices", {**NOTICE, "body": ""}, "body"),
        ("send_notices", {**NOTICE, "policy": "eventually"}, "policy"),
    ],
)
def test_invalid_arguments_name_the_field(name: str, arguments: object, field: str) -> None:
    ok, error = tools.validate_call(name, arguments)

    assert not ok
    assert error["kind"] == "invalid_arguments"
    assert error["field"] == field
    assert field in str(error["message"])


def test_duplicate_recipients_are_rejected_case_insensitively() -> None:
    recipients = ["a@x.com", "b@y.com", "A@X.com"]

    ok, error = tools.validate_call("send_notices", {**NOTICE, "recipients": recipients})

    assert not ok
    assert error["field"] == "recipients"
    assert error["problems"] == [{"field": "recipients", "message": "duplicate address a@x.com"}]


def test_every_problem_is_listed_not_only_the_first() -> None:
    ok, error = tools.validate_call("send_notices", {"recipients": [], "subject": "", "body": "b"})

    assert not ok
    problems = cast(list[dict[str, str]], error["problems"])
    assert [p["field"] for p in problems] == ["recipients", "subject"]


def test_errors_are_json() -> None:
    _, error = tools.validate_call("send_notices", {**NOTICE, "recipients": ["nope"]})

    assert json.loads(json.dumps(error)) == error


def test_openai_specs_cover_the_catalogue_with_schemas_from_the_models() -> None:
    specs: list[dict[str, Any]] = json.loads(json.dumps(tools.openai_tool_specs()))

    assert [s["function"]["name"] for s in specs] == list(tools.TOOLS)
    notices = next(s for s in specs if s["function"]["name"] == "send_notices")["function"][
        "parameters"
    ]
    assert notices["required"] == ["recipients", "subject", "body"]
    assert notices["additionalProperties"] is False
    assert notices["properties"]["recipients"]["maxItems"] == 50
    assert notices["properties"]["recipients"]["items"]["format"] == "email"


def test_every_spec_has_a_description_for_the_model() -> None:
    assert all(spec.description for spec in tools.TOOLS.values())


def test_a_run_with_declared_tools_may_call_only_those() -> None:
    allowed = ["calculator"]
    assert tools.validate_call("calculator", {"expression": "1+1"}, allowed)[0] is True
    ok, error = tools.validate_call("append_ledger", {"text": "x"}, allowed)
    assert not ok and error["kind"] == "tool_not_allowed" and error["field"] == "name"
    assert "calculator" in str(error["message"])
    names = [spec["function"]["name"] for spec in tools.openai_tool_specs(allowed)]  # type: ignore[index]
    assert names == ["calculator"]
    assert len(tools.openai_tool_specs()) == len(tools.TOOLS)
