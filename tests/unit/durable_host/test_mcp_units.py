"""The pure parts of the MCP extension: declarations as the extension lists them, and return
values as the extension converts them (``durable_host/triggers/mcp/catalog.py``,
``results.py``); the session ids (``sessions.py``) on an in-memory secret store; a tool's
arguments as binding data for other bindings' paths (``calls.py``); the legacy SSE
transport's inbox between hosts (``relay.py``)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

import azure.functions as func
import mcp_types as types
import pytest

from durable_host.functions.loader import FunctionInfo
from durable_host.triggers.mcp import relay, results
from durable_host.triggers.mcp.calls import argument_text
from durable_host.triggers.mcp.catalog import Catalog, CatalogError, input_schema
from durable_host.triggers.mcp.sessions import Sessions
from durable_host.triggers.storage.expressions import ExpressionError, resolve


def info(name: str, **trigger: Any) -> FunctionInfo:
    binding = {"direction": "IN", "name": "context", **trigger}
    return FunctionInfo(name, "mcp", lambda context: None, (binding,))


def test_tool_properties_make_the_extensions_schema() -> None:
    schema, required = input_schema(
        [
            {
                "propertyName": "city",
                "propertyType": "string",
                "description": "Where.",
                "isRequired": True,
            },
            {"PropertyName": "days", "PropertyType": "integer", "IsArray": True},
            {"propertyName": "unit", "propertyType": "string", "enumValues": ["C", "F"]},
            {"propertyName": "", "propertyType": "string"},
        ]
    )
    assert schema == {
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": "Where."},
            "days": {"type": "array", "items": {"type": "integer"}, "description": ""},
            "unit": {"type": "string", "enum": ["C", "F"], "description": ""},
        },
        "required": ["city"],
    }
    assert required == ("city",)


def test_templates_match_one_segment_per_expression_and_names_ignore_case() -> None:
    catalog = Catalog.build(
        [
            info("a", type="mcpResourceTrigger", uri="file://docs/{name}", resourceName="doc"),
            info("b", type="mcpResourceTrigger", uri="res://q?id={id}&v={v}", resourceName="q"),
            info("c", type="mcpResourceTrigger", uri="file://Readme.md", resourceName="r"),
            info("t", type="mcpToolTrigger", toolName="Hello", toolProperties="[]"),
        ]
    )
    assert catalog.resource("file://docs/x.md") is not None
    assert catalog.resource("file://docs/a/b.md") is None  # one segment per expression
    assert catalog.resource("res://q?id=1&v=2") is not None
    assert catalog.resource("FILE://readme.md") is not None
    assert catalog.tool("hello") is not None
    assert [t.wire()["uriTemplate"] for t in catalog.templates] == [
        "file://docs/{name}",
        "res://q?id={id}&v={v}",
    ]


@pytest.mark.parametrize(
    ("functions", "problem"),
    [
        (
            [
                info("a", type="mcpToolTrigger", toolName="x"),
                info("b", type="mcpToolTrigger", toolName="X"),
            ],
            "already declared",
        ),
        ([info("a", type="mcpResourceTrigger", uri="file://{a}{b}")], "separated"),
        ([info("a", type="mcpResourceTrigger", uri="no-scheme")], "not absolute"),
        ([info("a", type="mcpResourceTrigger", uri="file://x}")], "braces"),
        ([info("a", type="mcpToolTrigger", toolName="x", toolProperties="{}")], "array"),
        ([info("a", type="mcpToolTrigger", toolName="x", metadata="[1]")], "object"),
    ],
)
def test_declarations_the_extension_refuses_name_the_function(
    functions: list[FunctionInfo], problem: str
) -> None:
    with pytest.raises(CatalogError, match=problem) as raised:
        Catalog.build(functions)
    assert "function 'a'" in str(raised.value) or "function 'b'" in str(raised.value)


@func.mcp_content
@dataclass
class Point:
    x: int
    y: int


def test_tool_results_as_the_extension_and_the_newer_library_make_them() -> None:
    text = {"content": [{"type": "text", "text": "hi"}]}
    assert results.tool_result("hi", False) == text
    assert results.tool_result(5, False) == {"content": [{"type": "text", "text": "5"}]}
    assert results.tool_result(None, False) == {"content": []}
    block = types.ImageContent(type="image", data="AA==", mimeType="image/png")
    assert results.tool_result(block, False) == {
        "content": [{"type": "image", "data": "AA==", "mimeType": "image/png"}]
    }
    whole = types.CallToolResult(
        content=[types.TextContent(type="text", text="t")], structuredContent={"a": 1}, isError=True
    )
    assert results.tool_result(whole, False) == {
        "content": [{"type": "text", "text": "t"}],
        "structuredContent": {"a": 1},
        "isError": True,
    }
    assert results.tool_result(Point(1, 2), False) == {
        "content": [{"type": "text", "text": '{"x": 1, "y": 2}'}],
        "structuredContent": {"x": 1, "y": 2},
    }
    # the envelope of use_result_schema, as the 1.26 wrapper and the extension read it
    envelope = json.dumps(
        {
            "type": "text",
            "content": json.dumps({"type": "text", "text": "e"}),
            "structuredContent": json.dumps({"k": 1}),
        }
    )
    assert results.tool_result(envelope, True) == {
        "content": [{"type": "text", "text": "e"}],
        "structuredContent": {"k": 1},
    }
    many = json.dumps(
        {"type": "multi_content_result", "content": json.dumps([{"type": "text", "text": "1"}])}
    )
    assert results.tool_result(many, True)["content"] == [{"type": "text", "text": "1"}]
    with pytest.raises(results.ResultError):
        results.tool_result("plain text", True)


def test_resource_and_prompt_results() -> None:
    assert results.resource_result("x", "file://a", "text/plain") == {
        "contents": [{"uri": "file://a", "text": "x", "mimeType": "text/plain"}]
    }
    assert results.resource_result(b"\x00\x01", "file://b", None) == {
        "contents": [{"uri": "file://b", "blob": "AAE="}]
    }
    wrapped = json.dumps({"content": json.dumps({"text": "w"})})
    assert results.resource_result(wrapped, "file://c", "text/x") == {
        "contents": [{"text": "w", "uri": "file://c", "mimeType": "text/x"}]
    }
    assert results.prompt_result("p", False) == {
        "messages": [{"role": "user", "content": {"type": "text", "text": "p"}}]
    }
    messages = json.dumps(
        {
            "type": "prompt_messages",
            "content": json.dumps(
                [{"role": "assistant", "content": {"type": "text", "text": "a"}}]
            ),
        }
    )
    assert results.prompt_result(messages, True)["messages"][0]["role"] == "assistant"


class MemorySecrets:
    def __init__(self) -> None:
        self.values: dict[str, str] = {}

    async def get_secret(self, name: str) -> str | None:
        return self.values.get(name)

    async def swap_secret(self, name: str, expected: str | None, value: str) -> bool:
        if self.values.get(name) != expected:
            return False
        self.values[name] = value
        return True


def test_a_session_id_issued_by_one_host_verifies_on_another_of_the_hub() -> None:
    store = MemorySecrets()
    one, two, elsewhere = Sessions(store), Sessions(store), Sessions(MemorySecrets())
    for sessions in (one, two, elsewhere):
        asyncio.run(sessions.load())
    session_id, token = one.issue()
    assert two.verify(token) == session_id
    assert elsewhere.verify(token) is None
    assert two.verify(token[:-1] + ("A" if token[-1] != "A" else "B")) is None
    assert two.verify("") is None and two.verify("x" * 500) is None


def test_tool_arguments_resolve_in_paths_as_the_extensions_text() -> None:
    args = {"name": "a", "n": 5, "on": True, "none": None, "obj": {"k": [1, "x"]}}
    data = {"mcptoolargs": {k: argument_text(v) for k, v in args.items()}}
    path = "c/{mcptoolargs.name}-{McpToolArgs.N}-{mcptoolargs.on}-{mcptoolargs.none}.json"
    assert resolve(path, data) == "c/a-5-True-.json"
    assert resolve("{mcptoolargs.obj}", data) == '{"k":[1,"x"]}'
    with pytest.raises(ExpressionError, match=r"No value for named parameter 'mcptoolargs.x'\."):
        resolve("c/{mcptoolargs.x}", data)


def test_the_sse_relay_hands_a_message_to_the_host_holding_the_stream() -> None:
    store, now = MemorySecrets(), [1000.0]
    holder = relay.Relay(store, "aaa", clock=lambda: now[0])
    poster = relay.Relay(store, "bbb", clock=lambda: now[0])

    async def go() -> None:
        assert not await poster.post("aaa-1", {"id": 1}, {})  # no inbox yet: nobody holds it
        await holder.open()
        headers = {"x-functions-key": "secret", "X-Test": "t"}
        assert await poster.post("aaa-1", {"id": 1}, headers)
        assert "secret" not in store.values[relay.PREFIX + "aaa"]  # the key is never stored
        taken = await holder.take()
        assert [(m["client"], m["message"], m["headers"]) for m in taken] == [
            ("aaa-1", {"id": 1}, {"X-Test": "t"})
        ]
        assert await holder.take() == []
        assert not await poster.post("bbb-1", {"id": 2}, {})  # its own stream: not relayed
        assert not await poster.post("plainid", {"id": 2}, {})  # no holder's tag
        for i in range(relay.MAX_MESSAGES):
            assert await poster.post("aaa-1", {"id": i}, {})
        with pytest.raises(relay.InboxFull):
            await poster.post("aaa-1", {"id": "one too many"}, {})
        await holder.take()
        now[0] += relay.STALE + 1  # the holder died without a word: its inbox went stale
        assert not await poster.post("aaa-1", {"id": 3}, {})
        await holder.open()
        assert await poster.post("aaa-1", {"id": 4}, {})
        await holder.close()  # stopped: refused at once, what waited is dropped
        assert not await poster.post("aaa-1", {"id": 5}, {})

    asyncio.run(go())
