"""MCP servers' tools in the turn, end to end: real servers from PyPI over stdio, a Streamable
HTTP server the test starts, the offline planner's ``call <tool> with <JSON>`` rule.

Crashes (SIGKILL of the host mid-call) are in ``test_mcp_crash.py``. The tests that start
hosts run with ``KERNEL_MCP_LONG=1`` (docs/testing.md); by default the demo's test drives the
time server through a turn.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.app.mcp_support import HttpServer, config, stdio
from tests.app.turn_support import entries_of, submit, view, wait_final
from tests.harness import HostProcess, wait_for

long = pytest.mark.skipif(
    not os.environ.get("KERNEL_MCP_LONG"), reason="a long MCP test: KERNEL_MCP_LONG=1 runs it"
)


@long  # the demo (tests/app/test_demo.py) runs the same server through a turn by default
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


TOKEN = "tok-" + "a7" * 12


@long
def test_bad_configuration_fails_the_turn_naming_server_and_field_and_the_app_serves(
    fresh_kernel_host: Callable[..., HostProcess],
) -> None:
    host = fresh_kernel_host(
        {"AGENT_MCP_SERVERS": config(git={"command": "x", "args": ["ok", 3]})}
    ).start()
    sub = submit(host, "bad", "calculate 1+1")
    final = wait_final(host, "bad", sub)

    assert final["status"] == "failed"
    reason = view(host, "bad")["tasks"][f"bad:turn:{sub}"]["reason"]
    assert reason == 'invalid_settings: AGENT_MCP_SERVERS: server "git": args[1]: must be a string'
    assert host.get("/api/sessions/bad").status == 200


@long
def test_http_server_arguments_checked_first_content_stored_progress_previewed(
    fresh_kernel_host: Callable[..., HostProcess], tmp_path: Path
) -> None:
    server = HttpServer(tmp_path / "mcp-http", TOKEN).start()
    try:
        host = fresh_kernel_host(
            {
                "AGENT_MCP_SERVERS": config(
                    t={"url": server.url, "headers": {"Authorization": "Bearer %T_TOKEN%"}}
                ),
                "T_TOKEN": TOKEN,
                "AGENT_PREVIEWS": "on",
                "AGENT_PREVIEW_DIR": str(tmp_path / "previews"),
            }
        ).start()
        refused = submit(host, "h", 'call mcp__t__create_ticket with {"title": 5}', "r1")
        assert "(invalid_arguments)" in wait_final(host, "h", refused)["answer"]
        assert server.calls("create_ticket") == 0  # nothing was sent

        unknown = submit(host, "h", "call mcp__t__nothing with {}", "r2")
        assert "(unknown_tool)" in wait_final(host, "h", unknown)["answer"]

        picture = submit(host, "h", "call mcp__t__picture with {}", "r3")
        assert wait_final(host, "h", picture)["status"] == "completed"
        [text, image] = last_result(host, "h")["content"]
        assert text["content_ref"].startswith("sha256:") and text["bytes"] == 20_000
        assert (image["type"], image["mimeType"]) == ("image", "image/png")
        assert image["content_ref"].startswith("sha256:")

        slow = submit(host, "h", 'call mcp__t__slow with {"seconds": 3}', "r4")
        seen = wait_for(
            lambda: (
                [
                    p["text"]
                    for p in host.get("/api/sessions/h/changes?after=0&previews=").json()[
                        "previews"
                    ]
                    if "half way" in p.get("text", "")
                ]
                or None
            ),
            60,
            "the tool's progress as a preview",
            interval=0.05,
        )
        assert seen == ["mcp__t__slow: slow: 1/2 half way"] or "1/2 half way" in seen[0]
        assert wait_final(host, "h", slow)["answer"] == "mcp__t__slow: slow done"
        assert "half way" not in json.dumps(entries_of(host, "h"))  # never history
    finally:
        server.kill()


def last_result(host: HostProcess, session: str) -> dict:
    tools = [e for e in entries_of(host, session, "message") if e["role"] == "tool"]
    data = tools[-1]["data"]
    if "result" in data:
        return data["result"]
    raise AssertionError(f"the result is stored by reference: {tools[-1]}")


def test_a_result_of_many_small_items_keeps_only_references_inline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from activities import mcp as mcp_activities
    from adapters.content_store import default_store
    from kernel.turn import mcp_catalogue

    monkeypatch.setenv("AGENT_STATE_STORE", "file")
    monkeypatch.setenv("AGENT_CONTENT_DIR", str(tmp_path / "content"))
    raw = {
        "content": [{"type": "text", "text": f"{i}" * 3000} for i in range(10)],
        "structuredContent": {"rows": list(range(100))},
    }
    shaped = mcp_catalogue.shape_result(raw, inline_bytes=4096, max_bytes=1 << 20)

    stored = mcp_activities._store_large(shaped)

    assert len(json.dumps(stored)) < 12 * 1024
    assert [item["bytes"] for item in stored["content"]] == [3000] * 10
    assert default_store().get(stored["content"][3]["content_ref"]) == "3" * 3000
    ref = stored["structuredContent"]["content_ref"]
    assert json.loads(default_store().get(ref)) == {"rows": list(range(100))}
