"""``adapters/mcp_client.py`` without a host: the setting as a file, servers that cannot be
reached (never sent), secrets masked in what it answers, and MCP tasks against a server that
runs them (``tests/app/mcp_task_server.py``)."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from adapters import mcp_client
from kernel.turn.mcp_config import McpConfigError, parse


def test_the_setting_may_name_a_file(tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {"t": {"url": "http://127.0.0.1:1/mcp"}}}))

    [server] = mcp_client.servers({"AGENT_MCP_SERVERS": str(path)})

    assert server.name == "t"
    with pytest.raises(McpConfigError, match="cannot read the file"):
        mcp_client.servers({"AGENT_MCP_SERVERS": str(tmp_path / "missing.json")})
    assert mcp_client.servers({}) == ()


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_server_nobody_answers_is_unavailable_and_the_call_was_never_sent() -> None:
    secret = "s3cret-value-42"
    [server] = parse(
        json.dumps(
            {
                "mcpServers": {
                    "t": {
                        "url": f"http://127.0.0.1:{closed_port()}/mcp?k={secret}",
                        "headers": {"Authorization": "Bearer %TOKEN%"},
                    }
                }
            }
        )
    )

    called = asyncio.run(mcp_client.call_tool(server, {"TOKEN": secret}, "x", {}, timeout_s=20))
    listed = asyncio.run(mcp_client.list_tools(server, {"TOKEN": secret}, timeout_s=20))

    assert (called["ok"], called["kind"], called["sent"]) == (False, "mcp_unavailable", False)
    assert secret not in json.dumps(called) and not listed["ok"]


def test_a_command_that_does_not_exist_is_unavailable() -> None:
    [server] = parse(json.dumps({"mcpServers": {"s": {"command": "/nonexistent/mcp-server"}}}))

    called = asyncio.run(mcp_client.call_tool(server, {}, "x", {}, timeout_s=20))

    assert (called["kind"], called["sent"]) == ("mcp_unavailable", False)


def test_a_missing_setting_for_a_placeholder_is_unavailable_naming_it() -> None:
    [server] = parse(
        json.dumps({"mcpServers": {"t": {"url": "http://x/mcp", "headers": {"A": "%NOPE%"}}}})
    )

    called = asyncio.run(mcp_client.call_tool(server, {}, "x", {}, timeout_s=5))

    assert called["kind"] == "mcp_unavailable"
    assert "headers.A: the app setting NOPE is not set" in called["message"]


@pytest.fixture(scope="module")
def task_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from tests.app.mcp_support import HttpServer

    http = HttpServer(
        tmp_path_factory.mktemp("tasks"), "tok-adapter", script="mcp_task_server.py"
    ).start()
    yield http
    http.release("build")
    http.kill()


def task_config(url: str) -> Any:
    [server] = parse(
        json.dumps({"mcpServers": {"t": {"url": url, "headers": {"Authorization": "Bearer %T%"}}}})
    )
    return server


def test_a_call_the_server_runs_as_a_task_answers_its_handle_and_is_polled(task_server) -> None:
    server, settings = task_config(task_server.url), {"T": "tok-adapter"}

    async def scenario() -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any]]:
        called = await mcp_client.call_tool(
            server, settings, "build", {"name": "n"}, 20, follow_tasks=True
        )
        polls = []
        for _ in range(100):
            polls.append(
                await mcp_client.get_task(server, settings, called["task"]["taskId"], 20, "build")
            )
            if polls[-1].get("status") != "working":
                break
            await asyncio.sleep(0.1)
        plain = await mcp_client.call_tool(server, settings, "build", {"name": "p"}, 20)
        return called, polls, plain

    called, polls, plain = asyncio.run(scenario())

    task = called["task"]
    assert (task["status"], task["pollIntervalMs"]) == ("working", 200) and task["taskId"]
    assert polls[-1]["status"] == "completed"
    assert polls[-1]["result"]["structuredContent"] == {"result": "built n"}
    # without following tasks the same tool answers in the call
    assert plain["raw"]["structuredContent"] == {"result": "built p"}


def test_polls_of_an_unknown_task_and_of_a_server_that_is_gone(task_server) -> None:
    server, settings = task_config(task_server.url), {"T": "tok-adapter"}
    gone = task_config(f"http://127.0.0.1:{closed_port()}/mcp")

    unknown = asyncio.run(mcp_client.get_task(server, settings, "no-such-task", 20, "build"))
    down = asyncio.run(mcp_client.get_task(gone, settings, "t1", 20, "build"))
    cancelled = asyncio.run(mcp_client.cancel_task(gone, settings, "t1", 5))

    assert (unknown["ok"], unknown["kind"]) == (False, "mcp_task_lost")
    assert "no-such-task" in unknown["message"]
    assert (down["ok"], down["kind"]) == (False, "mcp_unavailable")
    assert cancelled is False
