"""What the MCP test app (``tests/apps/mcp``) serves, checked through an SDK client: every
kind of tool, resource and prompt. Shared by the tests with keys off and on."""

from __future__ import annotations

import json
from typing import Any


async def check_tools(client: Any, transport: str) -> None:
    """Every kind of tool, listed and called, as the extension serves them."""
    assert client.server_info is not None
    assert client.server_info.name == "Test MCP server"
    assert client.server_info.version == "2.1.0"
    assert client.instructions == "Tools, resources and prompts of the host's MCP test app."
    tools = {t.name: t for t in (await client.list_tools()).tools}
    assert {"hello", "add", "echo", "shout", "rich_text", "blocks", "weather"} <= set(tools)
    # mcp_tool: the docstring, the signature (a default makes a property optional)
    assert tools["hello"].description == "Greets someone by name."
    schema = tools["hello"].input_schema
    assert schema["properties"]["name"]["type"] == "string"
    assert schema["properties"]["times"]["type"] == "integer"
    assert schema["required"] == ["name"]
    # mcp_tool_property; the MCPToolContext parameter is no property
    add = tools["add"].input_schema
    assert add["properties"]["numbers"] == {
        "type": "array",
        "items": {"type": "integer"},
        "description": "The numbers to add.",
    }
    assert "context" not in add["properties"]
    # mcp_tool_trigger and generic_trigger with toolProperties JSON
    assert tools["echo"].input_schema["required"] == ["text"]
    assert tools["shout"].description == "Upper-cases a word."
    # an MCP App: the tool points at its UI resource
    assert tools["show_card"].meta == {"ui": {"resourceUri": "ui://widget/card.html"}}

    def text(result: Any) -> str:
        assert not result.is_error, result
        return str(result.content[0].text)

    assert text(await client.call_tool("hello", {"name": "Ann", "times": 2})) == (
        "Hello, Ann! Hello, Ann!"
    )
    assert text(await client.call_tool("add", {"numbers": [1, 2, 3]})) == "add=6"
    echoed = json.loads(text(await client.call_tool("echo", {"text": "hi"})))
    assert echoed["text"] == "hi"
    assert echoed["transport"] == ("http-streamable" if transport == "http" else "http-sse")
    assert echoed["session"] is True  # the context names the client's session
    assert text(await client.call_tool("shout", {"word": "quiet"})) == "QUIET"
    # content objects of the mcp SDK are real content, not their repr
    assert text(await client.call_tool("rich_text", {})) == "rich"
    picture = await client.call_tool("picture", {})
    assert picture.content[0].type == "image"
    assert picture.content[0].mime_type == "image/png"
    blocks = await client.call_tool("blocks", {})
    assert [b.type for b in blocks.content] == ["text", "resource_link"]
    assert str(blocks.content[1].uri) == "file://readme.md"
    full = await client.call_tool("full_result", {})
    assert full.structured_content == {"count": 42}
    assert text(full) == "42 items"
    # @func.mcp_content with use_result_schema: text JSON and structured content
    weather = await client.call_tool("weather", {"city": "Oslo"})
    assert weather.structured_content == {"city": "Oslo", "celsius": 21.5}
    assert json.loads(text(weather)) == {"city": "Oslo", "celsius": 21.5}
    # an exception: an error result with its message, no traceback
    failed = await client.call_tool("fails", {"city": "Atlantis"})
    assert failed.is_error
    message = failed.content[0].text
    assert "ValueError: no weather for Atlantis" in message
    assert "Traceback" not in message and ".py" not in message


async def check_resources_and_prompts(client: Any) -> None:
    """Every kind of resource and prompt, listed and read or got."""
    resources = {str(r.uri): r for r in (await client.list_resources()).resources}
    readme = resources["file://readme.md"]
    assert (readme.name, readme.title, readme.mime_type, readme.size) == (
        "readme",
        "Read me",
        "text/markdown",
        20,
    )
    assert readme.description == "The app's readme."
    assert readme.meta == {"audience": ["user"]}
    assert resources["ui://widget/card.html"].mime_type == "text/html;profile=mcp-app"
    templates = (await client.list_resource_templates()).resource_templates
    assert [t.uri_template for t in templates] == ["file://docs/{name}"]

    read = await client.read_resource("file://readme.md")
    assert read.contents[0].text == "# MCP test app\n"
    assert read.contents[0].mime_type == "text/markdown"
    doc = await client.read_resource("file://docs/guide.txt")
    assert doc.contents[0].text == "document guide.txt"
    assert str(doc.contents[0].uri) == "file://docs/guide.txt"
    logo = await client.read_resource("file://logo.png")
    assert logo.contents[0].blob == "iVBORw0K"  # base64 of the bytes returned
    card = await client.read_resource("ui://widget/card.html")
    assert "<h1>Card</h1>" in card.contents[0].text

    prompts = {p.name: p for p in (await client.list_prompts()).prompts}
    review = prompts["code_review"]
    assert review.title == "Code review"
    assert [(a.name, a.required) for a in review.arguments or []] == [
        ("code", True),
        ("language", False),
    ]
    got = await client.get_prompt("code_review", {"code": "x = 1", "language": "go"})
    assert got.messages[0].role == "user"
    assert got.messages[0].content.text == "Review this go code:\nx = 1"
    conversation = await client.get_prompt("conversation", {})
    assert [m.role for m in conversation.messages] == ["user", "assistant"]
