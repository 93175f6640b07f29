"""The MCP catalogue: names, policies from annotations, hashes, argument checks, results."""

from __future__ import annotations

import json

import pytest

from kernel.turn import mcp_catalogue as catalogue
from kernel.turn.mcp_config import parse

[GIT] = parse(
    json.dumps({"mcpServers": {"git": {"command": "g", "replay": {"git_log": "unsafe"}}}})
)
SCHEMA = {
    "type": "object",
    "properties": {"repo_path": {"type": "string"}},
    "required": ["repo_path"],
}


def tool(name: str, **annotations: bool) -> dict[str, object]:
    return {"name": name, "inputSchema": SCHEMA, "annotations": annotations}


@pytest.mark.parametrize(
    ("annotations", "policy"),
    [
        ({"readOnlyHint": True}, "safe"),
        ({"idempotentHint": True}, "safe"),
        ({"readOnlyHint": False, "idempotentHint": False, "destructiveHint": False}, "unsafe"),
        ({"destructiveHint": True}, "unsafe"),
        ({"openWorldHint": True}, "unsafe"),
        ({}, "unsafe"),
        (None, "unsafe"),
    ],
)
def test_the_policy_comes_from_the_annotations(annotations, policy) -> None:
    assert catalogue.policy_of(annotations, None) == policy


def test_the_configuration_overrides_a_tool_s_policy() -> None:
    assert catalogue.policy_of({"readOnlyHint": True}, "unsafe") == "unsafe"
    assert catalogue.policy_of({}, "safe") == "safe"


def test_build_names_tools_keeps_schemas_and_lists_problems() -> None:
    built = catalogue.build(
        [GIT],
        {"git": {"ok": True, "tools": [
            tool("git_status", readOnlyHint=True), tool("git_commit"), tool("git_log", readOnlyHint=True),
            tool("bad.name"), {"name": "no_schema", "inputSchema": {"type": "string"}},
        ]}},
    )  # fmt: skip

    assert [(t["name"], t["policy"]) for t in built["tools"]] == [
        ("mcp__git__git_commit", "unsafe"),
        ("mcp__git__git_log", "unsafe"),  # the configuration's replay entry
        ("mcp__git__git_status", "safe"),
    ]
    assert len(built["problems"]) == 2
    assert built["servers"]["git"]["ok"] and built["servers"]["git"]["tools"] == 3


def test_the_hash_changes_with_the_tool_list_and_not_otherwise() -> None:
    one = catalogue.build([GIT], {"git": {"ok": True, "tools": [tool("git_status")]}})
    same = catalogue.build([GIT], {"git": {"ok": True, "tools": [tool("git_status")]}})
    more = catalogue.build([GIT], {"git": {"ok": True, "tools": [tool("git_status"), tool("x")]}})
    down = catalogue.build([GIT], {"git": {"ok": False, "error": "refused"}})

    assert catalogue.server_hashes(one) == catalogue.server_hashes(same)
    assert catalogue.server_hashes(one) != catalogue.server_hashes(more)
    assert catalogue.server_hashes(down) == {"git": None}
    assert "cannot list its tools: refused" in down["problems"][0]


def test_arguments_are_checked_against_the_input_schema() -> None:
    entry = {"name": "mcp__git__git_status", "input_schema": SCHEMA}

    assert catalogue.validate(entry, {"repo_path": "/r"}) == (True, {"repo_path": "/r"})
    ok, error = catalogue.validate(entry, {"repo_path": 3})
    assert not ok and error["kind"] == "invalid_arguments" and error["field"] == "repo_path"
    ok, error = catalogue.validate(entry, {})
    assert not ok and "'repo_path' is a required property" in error["message"]
    ok, error = catalogue.validate(entry, [1])
    assert not ok and error["field"] == "arguments"


def test_unknown_tools_say_why() -> None:
    built = catalogue.build([GIT], {"git": {"ok": True, "tools": [tool("git_status")]}})

    assert "no MCP server 'jira'" in catalogue.unknown(built, "mcp__jira__x")["message"]
    assert "its tools: mcp__git__git_status" in catalogue.unknown(built, "mcp__git__x")["message"]


def test_results_keep_text_structured_content_and_store_what_is_large() -> None:
    raw = {
        "content": [
            {"type": "text", "text": "short"},
            {"type": "text", "text": "y" * 5000},
            {"type": "image", "data": "QUJD", "mimeType": "image/png"},
        ],
        "structuredContent": {"a": 1},
        "isError": False,
    }

    shaped = catalogue.shape_result(raw, inline_bytes=4096, max_bytes=1 << 20)

    assert shaped["ok"] and shaped["structuredContent"] == {"a": 1}
    assert shaped["content"][0] == {"type": "text", "text": "short"}
    assert (
        shaped["content"][1]["_store"] == "y" * 5000 and len(shaped["content"][1]["preview"]) == 500
    )
    assert shaped["content"][2] == {
        "type": "image",
        "mimeType": "image/png",
        "_store": "QUJD",
        "bytes": 4,
    }


def test_is_error_is_a_tool_failure_and_a_huge_result_is_refused() -> None:
    failed = catalogue.shape_result(
        {"content": [{"type": "text", "text": "no such repo"}], "isError": True},
        inline_bytes=4096,
        max_bytes=1 << 20,
    )
    huge = catalogue.shape_result(
        {"content": [{"type": "text", "text": "z" * 2000}]}, inline_bytes=4096, max_bytes=1000
    )

    assert (failed["ok"], failed["kind"], failed["message"]) == (
        False,
        "mcp_tool_error",
        "no such repo",
    )
    assert (huge["ok"], huge["kind"]) == (False, "result_too_large")


def test_openai_specs_offer_the_catalogued_tools() -> None:
    built = catalogue.build([GIT], {"git": {"ok": True, "tools": [tool("git_status")]}})

    [spec] = catalogue.openai_specs(built)

    assert spec["function"]["name"] == "mcp__git__git_status"
    assert spec["function"]["parameters"] == SCHEMA
    assert catalogue.openai_specs(built, ["calculator"]) == []
