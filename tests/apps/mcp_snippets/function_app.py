"""Microsoft's remote MCP sample (``remote-mcp-functions-python``, ``FunctionsMcpTool``) recreated
from its documented behaviour: ``hello_mcp`` answers a fixed greeting, ``save_snippet`` writes a
snippet to the blob ``snippets/<name>.json`` through a blob output binding and ``get_snippet``
reads it back through a blob input binding, both paths built from the tool's argument with
``{mcptoolargs.snippetname}``. The app's own storage is ``AzureWebJobsStorage``
(``UseDevelopmentStorage=true`` locally).

Beside the sample, for the cases it leaves out (tests/host/test_mcp_storage.py): the earlier
form of the sample (``generic_trigger`` with a ``toolProperties`` JSON string and the context
JSON), a tool that fails after setting its output, a queue output named from an argument, a
blob named by the MCP session (``{mcpsessionid}``) and a resource read from a blob."""

import json

import azure.functions as func

app = func.FunctionApp(http_auth_level=func.AuthLevel.ANONYMOUS)

_SNIPPET_NAME = "snippetname"
_SNIPPET = "snippet"
_BLOB_PATH = "snippets/{mcptoolargs." + _SNIPPET_NAME + "}.json"


@app.mcp_tool()
def hello_mcp() -> str:
    """Hello world."""
    return "Hello I am MCPTool!"


@app.mcp_tool()
@app.mcp_tool_property(arg_name="snippetname", description="The name of the snippet.")
@app.blob_input(arg_name="file", connection="AzureWebJobsStorage", path=_BLOB_PATH)
def get_snippet(file: func.InputStream, snippetname: str) -> str:
    """Retrieve a snippet by name from Azure Blob Storage."""
    if file is None:  # a missing input blob arrives as None, as on the Functions host
        return f"Snippet '{snippetname}' not found"
    return file.read().decode("utf-8")


@app.mcp_tool()
@app.mcp_tool_property(arg_name="snippetname", description="The name of the snippet.")
@app.mcp_tool_property(arg_name="snippet", description="The content of the snippet.")
@app.blob_output(arg_name="file", connection="AzureWebJobsStorage", path=_BLOB_PATH)
def save_snippet(file: func.Out[str], snippetname: str, snippet: str) -> str:
    """Save a snippet with a name to Azure Blob Storage."""
    if not snippetname:
        return "No snippet name provided"
    if not snippet:
        return "No snippet content provided"
    file.set(snippet)
    return f"Snippet '{snippet}' saved successfully"


_PROPERTIES = json.dumps(
    [
        {"propertyName": _SNIPPET_NAME, "propertyType": "string", "description": "The name."},
        {"propertyName": _SNIPPET, "propertyType": "string", "description": "The content."},
    ]
)


@app.generic_trigger(
    arg_name="context",
    type="mcpToolTrigger",
    toolName="save_snippet_v1",
    description="Save a snippet (the sample's earlier, generic-trigger form).",
    toolProperties=_PROPERTIES,
)
@app.generic_output_binding(
    arg_name="file", type="blob", connection="AzureWebJobsStorage", path=_BLOB_PATH
)
def save_snippet_v1(file: func.Out[str], context: str) -> str:
    arguments = json.loads(context)["arguments"]
    file.set(arguments[_SNIPPET])
    return f"Snippet '{arguments[_SNIPPET]}' saved successfully"


@app.generic_trigger(
    arg_name="context",
    type="mcpToolTrigger",
    toolName="get_snippet_v1",
    description="Retrieve a snippet (the sample's earlier, generic-trigger form).",
    toolProperties=json.dumps(json.loads(_PROPERTIES)[:1]),
)
@app.generic_input_binding(
    arg_name="file", type="blob", connection="AzureWebJobsStorage", path=_BLOB_PATH
)
def get_snippet_v1(file: func.InputStream, context: str) -> str:
    return file.read().decode("utf-8")  # a missing blob (None) fails the call


@app.mcp_tool()
@app.mcp_tool_property(arg_name="snippetname", description="The name of the snippet.")
@app.blob_output(arg_name="file", connection="AzureWebJobsStorage", path=_BLOB_PATH)
def save_then_fail(file: func.Out[str], snippetname: str) -> str:
    """Sets its output, then fails: nothing is written."""
    file.set("never written")
    raise RuntimeError("the snippet store is read-only today")


@app.mcp_tool()
@app.mcp_tool_property(arg_name="topic", description="The queue's suffix.")
@app.mcp_tool_property(arg_name="note", description="The message.")
@app.queue_output(
    arg_name="out", queue_name="notes-{mcptoolargs.topic}", connection="AzureWebJobsStorage"
)
def post_note(out: func.Out[str], topic: str, note: str) -> str:
    """Queues a note on the queue notes-<topic>."""
    out.set(note)
    return "queued"


@app.mcp_tool()
@app.mcp_tool_property(arg_name="text", description="What to keep for this session.")
@app.blob_output(
    arg_name="file", connection="AzureWebJobsStorage", path="sessions/{mcpsessionid}.txt"
)
def remember(file: func.Out[str], text: str) -> str:
    """Keeps a text in a blob named after the MCP session."""
    file.set(text)
    return "kept"


@app.mcp_resource_trigger(
    arg_name="context",
    uri="snippet://pinned",
    resource_name="pinned",
    description="The snippet saved under the name 'pinned'.",
    mime_type="text/plain",
)
@app.blob_input(arg_name="file", connection="AzureWebJobsStorage", path="snippets/pinned.json")
def pinned(file: func.InputStream, context: str) -> str:
    return file.read().decode("utf-8") if file is not None else "(nothing pinned)"
