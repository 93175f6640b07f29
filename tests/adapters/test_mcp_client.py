"""``adapters/mcp_client.py`` without a host: the setting as a file, servers that cannot be
reached (never sent), and secrets masked in what it answers."""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path

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
