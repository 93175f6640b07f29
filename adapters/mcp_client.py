"""The MCP client side of the kernel: read ``AGENT_MCP_SERVERS``, list tools, call one tool.

IO lives here, through the official ``mcp`` SDK (``mcp.Client``; stdio servers are spawned as
subprocesses, Streamable HTTP servers reached with their headers). The SDK is imported when a
server is first reached, not with the app: it takes seconds to import, and an app without
``AGENT_MCP_SERVERS`` never needs it. Each operation opens its
own connection and closes it: a call belongs to one activity run, and a process that dies
takes nothing with it that recovery would need (the durable facts are in the attempt ledger
and the histories).

* ``servers(environ)``: the configured servers (``kernel.turn.mcp_config.parse``); the setting
  is inline JSON when it starts with ``{``, else the path of a JSON file. Raises
  ``McpConfigError``.
* ``list_tools(server, settings, timeout_s)``: ``{"ok": True, "tools": [wire tool dicts]}``
  (every page) or ``{"ok": False, "error"}``.
* ``call_tool(server, settings, tool, arguments, timeout_s, on_progress)``: ``{"ok": True,
  "raw": wire CallToolResult}`` or ``{"ok": False, "kind", "message", "sent"}`` where ``kind``
  is ``mcp_unavailable`` (the call was never sent: no connection, or the handshake failed),
  ``mcp_timeout`` (no answer within ``timeout_s``), ``mcp_lost`` (the connection broke after
  the call was sent: it may have had its effect), ``mcp_error`` (the server answered with a
  protocol error) or ``invalid_result`` (the answer breaks the tool's own output schema).
  Progress notifications go to ``on_progress(text)``, never into the result. With
  ``follow_tasks`` (Streamable HTTP servers) the client advertises MCP tasks
  (``adapters/mcp_tasks.py``); a call the server runs as a task answers ``{"ok": True,
  "task": <handle>}`` at once.
* ``get_task(server, settings, task_id, timeout_s)``: one ``tasks/get``: ``{"ok": True,
  "status", "result"?, "error"?, "statusMessage"?, "pollIntervalMs"?}`` or ``{"ok": False,
  "kind", "message"}`` with ``kind`` ``mcp_unavailable``, ``mcp_timeout``, ``mcp_task_lost``
  (the server does not know the task: it was forgotten, or the server restarted),
  ``mcp_error`` or ``invalid_result``.
* ``cancel_task(server, settings, task_id, timeout_s)``: one ``tasks/cancel``; ``True`` when
  the server took it.

Secrets: ``%NAME%`` values are resolved from ``settings`` only here, at connection time, and
every message this module returns has the resolved values masked, so an error that echoes a
header cannot carry it into a history or a log.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import sys
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from kernel.turn.mcp_config import SETTING, McpConfigError, McpServer, parse

MAX_PAGES = 20


def config_text(environ: Mapping[str, str]) -> str:
    """The configuration's JSON text: inline, or read from the file the setting names."""
    raw = (environ.get(SETTING) or "").strip()
    if not raw or raw.startswith("{"):
        return raw
    try:
        return Path(raw).read_text(encoding="utf-8")
    except OSError as exc:
        raise McpConfigError(None, None, f"cannot read the file {raw}: {exc.strerror}") from exc


def servers(environ: Mapping[str, str] | None = None) -> tuple[McpServer, ...]:
    return parse(config_text(os.environ if environ is None else environ))


def _transport(server: McpServer, settings: Mapping[str, str]) -> AbstractAsyncContextManager[Any]:
    from mcp import StdioServerParameters
    from mcp.client.stdio import stdio_client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    env, headers = server.resolve(settings)
    if server.transport == "http":
        http = create_mcp_http_client(headers=headers or None)
        return streamable_http_client(server.url, http_client=http)
    params = StdioServerParameters(
        command=server.command, args=list(server.args), env=env or None, cwd=server.cwd
    )
    return stdio_client(params, errlog=sys.stderr)


def _masked(text: str, server: McpServer, settings: Mapping[str, str]) -> str:
    try:
        env, headers = server.resolve(settings)
    except McpConfigError:
        return text
    for secret in (*env.values(), *headers.values()):
        if len(secret) >= 4 and secret in text:
            text = text.replace(secret, "***")
    return text


def _client(server: McpServer, settings: Mapping[str, str], follow_tasks: bool = False) -> Any:
    """An ``mcp.Client`` of ``server`` (``follow_tasks``: advertising MCP tasks)."""
    from mcp import Client

    from adapters import mcp_tasks

    return Client(
        _transport(server, settings), extensions=[mcp_tasks.extension()] if follow_tasks else []
    )


def _leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(inner) for inner in exc.exceptions[:3])
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:500]


async def list_tools(
    server: McpServer, settings: Mapping[str, str], timeout_s: float
) -> dict[str, Any]:
    """Every tool the server lists (all pages), as wire JSON."""

    try:
        async with asyncio.timeout(timeout_s):
            async with _client(server, settings) as client:
                tools: list[dict[str, Any]] = []
                cursor: str | None = None
                for _ in range(MAX_PAGES):
                    page = await client.list_tools(cursor=cursor)
                    tools.extend(
                        t.model_dump(mode="json", by_alias=True, exclude_none=True)
                        for t in page.tools
                    )
                    cursor = page.next_cursor
                    if not cursor:
                        break
                return {"ok": True, "tools": tools}
    except McpConfigError as exc:
        return {"ok": False, "error": str(exc)}
    except TimeoutError:
        return {"ok": False, "error": f"no tool list within {timeout_s:g} s"}
    except Exception as exc:  # noqa: BLE001 - an unreachable server is a catalogue fact
        return {"ok": False, "error": _masked(_describe(exc), server, settings)}


async def call_tool(
    server: McpServer,
    settings: Mapping[str, str],
    tool: str,
    arguments: dict[str, Any],
    timeout_s: float,
    on_progress: Callable[[str], None] | None = None,
    follow_tasks: bool = False,
) -> dict[str, Any]:
    """One ``tools/call``; see the module docstring for the answer's kinds."""
    from mcp.shared.exceptions import MCPError
    from mcp_types import CallToolResult
    from mcp_types.jsonrpc import HEADER_MISMATCH

    from adapters import mcp_tasks

    sent = False

    async def progress(progress: float, total: float | None, message: str | None) -> None:
        if on_progress is not None:
            amount = f"{progress:g}/{total:g}" if total else f"{progress:g}"
            on_progress(f"{tool}: {amount}{' ' + message if message else ''}"[:500])

    def failed(kind: str, message: str) -> dict[str, Any]:
        return {
            "ok": False,
            "kind": kind,
            "message": _masked(message, server, settings),
            "sent": sent,
        }

    try:
        async with asyncio.timeout(timeout_s):
            async with _client(server, settings, follow_tasks) as client:
                sent = True
                call = functools.partial(
                    client.session.call_tool,
                    tool,
                    arguments,
                    progress_callback=progress,
                    allow_claimed=True,
                )
                try:
                    result = await call()
                except MCPError as exc:
                    if exc.code != HEADER_MISMATCH:
                        raise
                    # A 2026-07-28 server refuses a call of a tool this connection has not
                    # listed (the call did not run): list, then call once more.
                    await client.list_tools()
                    result = await call()
                task = mcp_tasks.handle(result)
                if task is not None:
                    return {"ok": True, "task": task}
                if not isinstance(result, CallToolResult):
                    return failed("invalid_result", f"{server.name}: {tool}: not a tool result")
                raw = result.model_dump(mode="json", by_alias=True, exclude_none=True)
                return {"ok": True, "raw": raw}
    except McpConfigError as exc:
        return failed("mcp_unavailable", str(exc))
    except TimeoutError:
        if not sent:  # the handshake itself took too long: the call never left
            return failed(
                "mcp_unavailable", f"{server.name} did not connect within {timeout_s:g} s"
            )
        return failed("mcp_timeout", f"{server.name} did not answer {tool} within {timeout_s:g} s")
    except ValidationError as exc:
        return failed("invalid_result", f"{server.name}: {tool}: {exc}"[:500])
    except MCPError as exc:
        return failed("mcp_error", f"{server.name} refused {tool}: {exc.message}"[:500])
    except RuntimeError as exc:
        if "schema" in str(exc).lower() or "structured" in str(exc).lower():
            return failed("invalid_result", f"{server.name}: {tool}: {exc}"[:500])
        kind = "mcp_lost" if sent else "mcp_unavailable"
        return failed(kind, f"{server.name}: {_describe(exc)}")
    except Exception as exc:  # noqa: BLE001 - a broken server is a result the model reads
        kind = "mcp_lost" if sent else "mcp_unavailable"
        return failed(kind, f"{server.name}: {_describe(exc)}")


async def get_task(
    server: McpServer, settings: Mapping[str, str], task_id: str, timeout_s: float, tool: str
) -> dict[str, Any]:
    """One ``tasks/get`` of ``tool``'s task; a completed task's result is checked against
    the tool's output schema as a direct call's is."""
    from mcp.shared.exceptions import MCPError
    from mcp_types import INVALID_PARAMS, CallToolResult

    from adapters import mcp_tasks

    def failed(kind: str, message: str) -> dict[str, Any]:
        return {"ok": False, "kind": kind, "message": _masked(message, server, settings)[:500]}

    try:
        async with asyncio.timeout(timeout_s):
            async with _client(server, settings, follow_tasks=True) as client:
                state = await mcp_tasks.get(client.session, task_id, timeout_s)
                raw = state.get("result")
                if state["status"] == "completed" and raw is not None:
                    result = CallToolResult.model_validate(raw)
                    if not result.is_error:
                        await client.session.validate_tool_result(tool, result)
                    state["result"] = result.model_dump(
                        mode="json", by_alias=True, exclude_none=True
                    )
                return {"ok": True, **state}
    except TimeoutError:
        return failed(
            "mcp_timeout", f"{server.name} did not answer tasks/get within {timeout_s:g} s"
        )
    except Exception as caught:  # noqa: BLE001 - a server that is down is a poll to repeat
        exc = _leaf(caught)  # the SDK's task groups wrap what the server said
        if isinstance(exc, McpConfigError):
            return failed("mcp_unavailable", str(exc))
        if isinstance(exc, ValidationError):
            return failed("invalid_result", f"{server.name}: task {task_id}: {exc}")
        if isinstance(exc, MCPError) and exc.code == INVALID_PARAMS:
            return failed(
                "mcp_task_lost", f"{server.name} does not know task {task_id}: {exc.message}"
            )
        if isinstance(exc, MCPError):
            return failed("mcp_error", f"{server.name} refused tasks/get: {exc.message}")
        if isinstance(exc, RuntimeError) and ("schema" in str(exc) or "structured" in str(exc)):
            return failed("invalid_result", f"{server.name}: {tool}: {exc}")
        return failed("mcp_unavailable", f"{server.name}: {_describe(exc)}")


async def cancel_task(
    server: McpServer, settings: Mapping[str, str], task_id: str, timeout_s: float
) -> bool:

    from adapters import mcp_tasks

    try:
        async with asyncio.timeout(timeout_s):
            async with _client(server, settings, follow_tasks=True) as client:
                await mcp_tasks.cancel(client.session, task_id, timeout_s)
                return True
    except Exception:  # noqa: BLE001 - best effort: the task ends by its own TTL otherwise
        return False


def dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
