"""MCP servers' tools in the turn, end to end: real servers from PyPI over stdio, a Streamable
HTTP server the test starts, the offline planner's ``call <tool> with <JSON>`` rule.

Crashes (SIGKILL of the host mid-call) are in ``test_mcp_crash.py``.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from tests.app.mcp_support import config, stdio
from tests.app.turn_support import entries_of, submit, view, wait_final
from tests.harness import HostProcess


def test_a_read_only_tool_of_a_stdio_server_answers_through_the_turn(
    fresh_kernel_host: Callable[..., HostProcess],
) -> None:
    host = fresh_kernel_host(
        {"AGENT_MCP_SERVERS": config(time=stdio("mcp-server-time", "--local-timezone", "UTC"))}
    ).start()
    sub = submit(host, "mcp", 'call mcp__time__get_current_time with {"timezone": "UTC"}')
    final = wait_final(host, "mcp", sub)

    assert final["status"] == "completed", final
    assert final["answer"].startswith("mcp__time__get_current_time: {"), final["answer"]
    intent = entries_of(host, "mcp", "tool_intent")[0]["data"]
    assert (intent["server"], intent["tool"], intent["policy"]) == (
        "time",
        "get_current_time",
        "safe",
    )
    [result] = [e for e in entries_of(host, "mcp", "message") if e["role"] == "tool"]
    assert result["data"]["result"]["structuredContent"]["timezone"] == "UTC"
    document = view(host, "mcp")["documents"][f"environment.{sub}"]
    assert set(document["data"]["recorded"]["mcp"]) == {"time"}
    assert json.dumps(document).count("mcp__") == 0  # the catalogue itself is content
