"""A Streamable HTTP MCP server for the tests, built on the official SDK's ``MCPServer``.

``python mcp_http_server.py PORT`` with ``TEST_MCP_TOKEN`` (every request must carry
``Authorization: Bearer <token>``, else 401), ``TEST_MCP_FOLDER`` (where calls are counted and
holds are read) and ``TEST_MCP_VARIANT`` (``v2`` adds a tool, so the list changes).

Tools: ``lookup`` (read-only: echoes its key), ``create_ticket`` (no hints: not idempotent;
every call appends a line to ``create_ticket.calls``), ``slow`` (read-only; reports progress,
then sleeps ``seconds``), ``picture`` (read-only: an image and a long text). A call of a tool for which
``<tool>.hold`` exists counts itself, writes ``<tool>.arrived`` and waits until the file is gone.
"""

from __future__ import annotations

import asyncio
import base64
import os
import sys
from pathlib import Path

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ImageContent, TextContent, ToolAnnotations

from tests.app.mcp_bearer import serve

FOLDER = Path(os.environ["TEST_MCP_FOLDER"])
READ_ONLY = ToolAnnotations(readOnlyHint=True)
server = MCPServer("kernel-test")


def _count(tool: str) -> None:
    with open(FOLDER / f"{tool}.calls", "a") as file:
        file.write("call\n")
        file.flush()
        os.fsync(file.fileno())


async def _count_and_hold(tool: str) -> None:
    try:
        await asyncio.to_thread(_count, tool)
        if (FOLDER / f"{tool}.hold").exists():
            (FOLDER / f"{tool}.arrived").touch()
            while (FOLDER / f"{tool}.hold").exists():
                await asyncio.sleep(0.05)
    except BaseException as exc:  # the log (server.log) says why a call failed
        print(f"{tool}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        raise


@server.tool(annotations=READ_ONLY)
async def lookup(key: str) -> str:
    """Look a key up (read-only)."""
    await _count_and_hold("lookup")
    return f"value of {key}"


@server.tool()
async def create_ticket(title: str) -> str:
    """Create a ticket. Every call creates one."""
    await _count_and_hold("create_ticket")
    return f"ticket created: {title}"


@server.tool(annotations=READ_ONLY)
async def slow(seconds: float, ctx: Context) -> str:
    """Report progress, then wait."""
    await ctx.report_progress(1, 2, "half way")
    await asyncio.sleep(seconds)
    return "slow done"


@server.tool(annotations=READ_ONLY)
async def picture() -> list[TextContent | ImageContent]:
    """An image and a long text."""
    data = base64.b64encode(bytes(range(256)) * 40).decode()
    return [
        TextContent(type="text", text="x" * 20_000),
        ImageContent(type="image", data=data, mimeType="image/png"),
    ]


if os.environ.get("TEST_MCP_VARIANT") == "v2":

    @server.tool(annotations=READ_ONLY)
    async def added(key: str) -> str:
        """A tool that only the second version lists."""
        return key


def main() -> None:
    serve(server.streamable_http_app(), int(sys.argv[1]))


if __name__ == "__main__":
    main()
