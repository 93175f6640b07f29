"""The app of bench/mcp.py: a trivial MCP tool and a trivial HTTP function (the floor)."""

import azure.functions as func

app = func.FunctionApp(http_auth_level=func.AuthLevel.ANONYMOUS)


@app.mcp_tool()
def echo(text: str) -> str:
    """Returns its text."""
    return text


@app.route(route="echo", methods=["POST"])
def echo_http(req: func.HttpRequest) -> func.HttpResponse:
    return func.HttpResponse(req.get_body().decode())
