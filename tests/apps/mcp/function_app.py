"""An MCP server written for Azure Functions: every kind of tool, resource and prompt the
Python library declares, and tools that start orchestrations (tests/host/test_mcp*.py)."""

import asyncio
import json
from dataclasses import dataclass
from typing import Optional

import azure.durable_functions as df
import azure.functions as func
from mcp import types

app = df.DFApp()

CARD = "ui://widget/card.html"


@app.mcp_tool()
def hello(name: str, times: int = 1) -> str:
    """Greets someone by name."""
    return " ".join([f"Hello, {name}!"] * times)


@app.mcp_tool()
@app.mcp_tool_property(
    arg_name="numbers",
    description="The numbers to add.",
    as_array=True,
    property_type=func.McpPropertyType.INTEGER,
)
def add(numbers: list, context: func.MCPToolContext) -> str:
    """Adds numbers; says which tool the context named."""
    return f"{context['name']}={sum(numbers)}"


TRIGGER_PROPERTIES = json.dumps(
    [
        {
            "propertyName": "text",
            "propertyType": "string",
            "description": "What to echo.",
            "isRequired": True,
        }
    ]
)


@app.mcp_tool_trigger(
    arg_name="context",
    tool_name="echo",
    description="Echoes the context.",
    tool_properties=TRIGGER_PROPERTIES,
)
def echo(context) -> str:
    data = json.loads(context)
    return json.dumps(
        {
            "text": data["arguments"]["text"],
            "session": bool(data["sessionid"]),
            "transport": data["transport"]["name"],
        }
    )


@app.generic_trigger(
    arg_name="context",
    type="mcpToolTrigger",
    toolName="shout",
    description="Upper-cases a word.",
    toolProperties=json.dumps(
        [
            {
                "propertyName": "word",
                "propertyType": "string",
                "description": "A word.",
                "isRequired": True,
            }
        ]
    ),
)
def shout(context) -> str:
    return json.loads(context)["arguments"]["word"].upper()


@app.mcp_tool()
def rich_text() -> types.TextContent:
    """Returns one text content block."""
    return types.TextContent(type="text", text="rich")


@app.mcp_tool()
def picture() -> types.ImageContent:
    """Returns an image."""
    return types.ImageContent(type="image", data="iVBORw0KGgo=", mimeType="image/png")


@app.mcp_tool()
def blocks() -> list:
    """Returns several blocks, one a resource link."""
    return [
        types.TextContent(type="text", text="see the readme"),
        types.ResourceLink(
            type="resource_link", uri="file://readme.md", name="readme", mimeType="text/markdown"
        ),
    ]


@app.mcp_tool()
def full_result() -> types.CallToolResult:
    """Returns a whole CallToolResult with structured content."""
    return types.CallToolResult(
        content=[types.TextContent(type="text", text="42 items")], structuredContent={"count": 42}
    )


@func.mcp_content
@dataclass
class Weather:
    city: str
    celsius: float


@app.mcp_tool(use_result_schema=True)
def weather(city: str) -> Weather:
    """The weather in a city."""
    return Weather(city, 21.5)


@app.mcp_tool()
# Optional[...], not `str | None`: the 1.26 library reads only typing.Union as optional.
def fails(city: Optional[str] = None) -> str:  # noqa: UP045
    """Always raises."""
    raise ValueError(f"no weather for {city}")


@app.mcp_tool()
async def slow(seconds: float) -> str:
    """Sleeps, for cancellation."""
    await asyncio.sleep(seconds)
    return "slept"


@app.mcp_tool(metadata=json.dumps({"ui": {"resourceUri": CARD}}))
def show_card(title: str) -> str:
    """Shows a card (an MCP App)."""
    return f"card: {title}"


# --- durable functions behind MCP -------------------------------------------------------


@app.mcp_tool()
@app.durable_client_input(client_name="client")
async def start_countdown(client: df.DurableOrchestrationClient, seconds: int) -> str:
    """Starts a countdown orchestration; returns its id and status at once."""
    instance_id = await client.start_new("countdown", client_input=seconds)
    status = await client.get_status(instance_id)
    return json.dumps({"id": instance_id, "runtimeStatus": status.runtime_status.value})


@app.mcp_tool()
@app.durable_client_input(client_name="client")
async def countdown_status(client: df.DurableOrchestrationClient, instance_id: str) -> str:
    """The status and output of a countdown."""
    status = await client.get_status(instance_id)
    return json.dumps({"runtimeStatus": status.runtime_status.value, "output": status.output})


@app.mcp_tool()
@app.durable_client_input(client_name="client")
async def countdown_and_wait(client: df.DurableOrchestrationClient, seconds: int) -> str:
    """Starts a countdown and returns its output when it ends (or its status after 20 s)."""
    instance_id = await client.start_new("countdown", client_input=seconds)
    for _ in range(200):
        status = await client.get_status(instance_id)
        if status.runtime_status.value in ("Completed", "Failed", "Terminated"):
            return json.dumps(
                {"runtimeStatus": status.runtime_status.value, "output": status.output}
            )
        await asyncio.sleep(0.1)
    return json.dumps({"runtimeStatus": status.runtime_status.value, "id": instance_id})


@app.orchestration_trigger(context_name="context")
def countdown(context: df.DurableOrchestrationContext):
    seconds = context.get_input() or 0
    deadline = context.current_utc_datetime
    from datetime import timedelta

    yield context.create_timer(deadline + timedelta(seconds=seconds))
    result = yield context.call_activity("finish", seconds)
    return result


@app.activity_trigger(input_name="seconds")
def finish(seconds: int) -> str:
    return f"done after {seconds}s"


# --- resources ------------------------------------------------------------------------


@app.mcp_resource_trigger(
    arg_name="context",
    uri="file://readme.md",
    resource_name="readme",
    title="Read me",
    description="The app's readme.",
    mime_type="text/markdown",
    size=20,
    metadata=json.dumps({"audience": ["user"]}),
)
def readme(context) -> str:
    return "# MCP test app\n"


@app.mcp_resource_trigger(
    arg_name="context",
    uri="file://docs/{name}",
    resource_name="doc",
    description="A document by name.",
    mime_type="text/plain",
)
def doc(context) -> str:
    uri = json.loads(context)["uri"]
    return f"document {uri.rsplit('/', 1)[-1]}"


@app.mcp_resource_trigger(
    arg_name="context", uri="file://logo.png", resource_name="logo", mime_type="image/png"
)
def logo(context) -> bytes:
    return b"\x89PNG\r\n"


@app.mcp_resource_trigger(
    arg_name="context",
    uri=CARD,
    resource_name="card",
    mime_type="text/html;profile=mcp-app",
    metadata=json.dumps({"ui": {"prefersBorder": True}}),
)
def card(context) -> str:
    return "<html><body><h1>Card</h1></body></html>"


# --- prompts --------------------------------------------------------------------------


@app.mcp_prompt_trigger(
    arg_name="context",
    prompt_name="code_review",
    title="Code review",
    description="Asks for a review of some code.",
    prompt_arguments=[
        func.PromptArgument("code", "The code.", True),
        func.PromptArgument("language", "Its language."),
    ],
)
def code_review(context: func.PromptInvocationContext) -> str:
    language = context.arguments.get("language", "python")
    return f"Review this {language} code:\n{context.arguments['code']}"


@app.mcp_prompt_trigger(
    arg_name="context", prompt_name="conversation", description="A conversation of two messages."
)
def conversation(context) -> list:
    return [
        types.PromptMessage(role="user", content=types.TextContent(type="text", text="Hi")),
        types.PromptMessage(
            role="assistant", content=types.TextContent(type="text", text="Hello!")
        ),
    ]
