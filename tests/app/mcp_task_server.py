"""A Streamable HTTP MCP server that runs tools as MCP tasks, for the tests: FastMCP with its
tasks extension (``fastmcp-tasks``, the ``io.modelcontextprotocol/tasks`` extension; both
pinned in ``requirements-dev.txt``), its task state in the process (Docket's ``memory://``
backend), so a killed server forgets its tasks.

``python mcp_task_server.py PORT`` with ``TEST_MCP_TOKEN`` (every request must carry
``Authorization: Bearer <token>``, else 401) and ``TEST_MCP_FOLDER`` (where calls are counted
and holds are read).

Tools, each run as a task when the client follows tasks (polled every 0.2 s):

* ``build`` (no hints: not idempotent): counts itself in ``build.calls``, holds while
  ``build.hold`` exists (``build.arrived`` says it got there), answers ``built <name>``; a
  cancelled build writes ``build.cancelled``;
* ``broken``: fails (the task ends ``failed``).
"""

from __future__ import annotations

import asyncio
import os
import sys
from datetime import timedelta
from pathlib import Path

from fastmcp import FastMCP
from fastmcp.exceptions import ToolError
from fastmcp.utilities.tasks import TaskConfig
from fastmcp_tasks import TasksExtension

from tests.app.mcp_bearer import serve

FOLDER = Path(os.environ["TEST_MCP_FOLDER"])
AS_TASK = TaskConfig(mode="optional", poll_interval=timedelta(seconds=0.2))
server = FastMCP("kernel-task-test")
server.add_extension(TasksExtension())


def _mark(name: str) -> None:
    with open(FOLDER / name, "a") as file:
        file.write("call\n")
        file.flush()
        os.fsync(file.fileno())


@server.tool(task=AS_TASK)
async def build(name: str) -> str:
    """Build something; every call builds one."""
    await asyncio.to_thread(_mark, "build.calls")
    try:
        if (FOLDER / "build.hold").exists():
            (FOLDER / "build.arrived").touch()
            while (FOLDER / "build.hold").exists():
                await asyncio.sleep(0.05)
    except asyncio.CancelledError:
        await asyncio.to_thread(_mark, "build.cancelled")
        raise
    return f"built {name}"


@server.tool(task=AS_TASK)
async def broken(reason: str) -> str:
    """Always fails."""
    raise ToolError(f"cannot: {reason}")


def main() -> None:
    serve(server.http_app(path="/mcp"), int(sys.argv[1]))


if __name__ == "__main__":
    main()
