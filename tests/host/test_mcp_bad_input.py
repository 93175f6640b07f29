"""Bad input at the MCP endpoints: the protocol's errors with a clear message, nothing run
or written, the host unharmed; and cancellation of a running tool call."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import APPS, WEBHOOK, HostProcess, store_spec_for
from tests.host.mcp_client import MCP, rpc

APP = APPS / "mcp"
LIMIT = 1024 * 1024


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostProcess]:
    tmp: Path = tmp_path_factory.mktemp("mcpbad")
    # the host's request limit (the MCP endpoints share it), small so the test sends little
    limit = {"DURABLE_HOST_MAX_REQUEST_BYTES": str(LIMIT)}
    proc = HostProcess(APP, store_spec_for("sqlite", tmp), env=limit).start()
    yield proc
    proc.stop()


def session(host: HostProcess) -> str:
    status, body, headers = rpc(
        host,
        "initialize",
        {
            "protocolVersion": "2099-01-01",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    )
    assert status == 200 and body is not None
    # a version the server does not speak: it answers with the newest it speaks
    assert body["result"]["protocolVersion"] == "2025-11-25"
    return headers["Mcp-Session-Id"]


def error_of(result: tuple[int, dict[str, Any] | None, dict[str, str]]) -> tuple[int, int, str]:
    status, body, _ = result
    assert body is not None, status
    return status, body["error"]["code"], body["error"]["message"]


def test_malformed_messages_get_the_protocols_errors(host: HostProcess) -> None:
    assert error_of(rpc(host, "x", raw=b"{not json"))[:2] == (400, -32700)
    assert error_of(rpc(host, "x", raw=b"[]"))[:2] == (400, -32600)  # no batches
    assert error_of(rpc(host, "x", raw=b'{"id": 1, "method": "ping"}'))[:2] == (400, -32600)
    assert error_of(rpc(host, "x", raw=b'{"jsonrpc": "2.0", "id": 1, "method": 5}'))[:2] == (
        400,
        -32600,
    )
    # the client must accept both answers' types
    resp = host.request(
        "POST",
        MCP,
        raw=b'{"jsonrpc":"2.0","id":1,"method":"ping"}',
        headers={"Accept": "application/json"},
    )
    assert resp.status == 406
    assert host.request("GET", MCP).status == 405
    assert host.request("DELETE", MCP).status == 405


def test_unknown_names_and_bad_arguments(host: HostProcess) -> None:
    token = session(host)
    h = {"Mcp-Session-Id": token}
    assert rpc(host, "ping", headers=h)[1] == {"jsonrpc": "2.0", "id": 1, "result": {}}
    assert error_of(rpc(host, "tools/destroy", headers=h))[1:] == (
        -32601,
        "Method not found: 'tools/destroy'",
    )
    assert error_of(rpc(host, "tools/call", {"name": "nope"}, headers=h))[1:] == (
        -32602,
        "Unknown tool: 'nope'",
    )
    assert error_of(rpc(host, "resources/read", {"uri": "file://nope"}, headers=h))[1:] == (
        -32602,
        "Unknown resource: 'file://nope'",
    )
    assert error_of(rpc(host, "prompts/get", {"name": "nope"}, headers=h))[1:] == (
        -32602,
        "Unknown prompt: 'nope'",
    )
    status, code, message = error_of(
        rpc(
            host,
            "tools/call",
            {"name": "hello", "arguments": {"times": 2, "name": None}},
            headers=h,
        )
    )
    assert (status, code) == (200, -32602)
    assert message.endswith("Please provide: name")
    assert error_of(rpc(host, "tools/call", {"name": "hello", "arguments": [1]}, headers=h))[1] == (
        -32602
    )
    status, code, message = error_of(rpc(host, "prompts/get", {"name": "code_review"}, headers=h))
    assert code == -32602 and message.endswith("Please provide: code")
    # a session id this hub never issued; a protocol version this server does not speak
    assert error_of(rpc(host, "ping", headers={"Mcp-Session-Id": token + "x"}))[::2] == (
        400,
        "Invalid client state.",
    )
    assert rpc(host, "ping", headers={"MCP-Protocol-Version": "1999-01-01"})[0] == 400
    # notifications and responses are accepted with no answer
    status, body, _ = rpc(host, "notifications/initialized", id_=None, headers=h)
    assert (status, body) == (202, None)


def test_an_oversized_body_is_refused_and_the_host_stays_well(host: HostProcess) -> None:
    big = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "hello", "arguments": {"name": "x" * (LIMIT + 1)}},
        }
    ).encode()
    status, body, _ = rpc(host, "x", raw=big)
    assert status == 413 and body is not None and "limit" in body["error"]["message"]
    status, body, _ = rpc(host, "tools/call", {"name": "hello", "arguments": {"name": "still"}})
    assert status == 200 and body is not None
    assert body["result"]["content"][0]["text"] == "Hello, still!"
    # nothing of the refused calls reached the task hub
    assert host.get(f"{WEBHOOK}/instances").json() == []


def test_a_cancelled_call_gets_no_answer_and_the_host_goes_on(host: HostProcess) -> None:
    token = session(host)
    h = {"Mcp-Session-Id": token}
    outcome: dict[str, Any] = {}

    def call() -> None:
        outcome["answer"] = rpc(
            host, "tools/call", {"name": "slow", "arguments": {"seconds": 30}}, id_=77, headers=h
        )

    caller = threading.Thread(target=call)
    caller.start()
    asyncio.run(asyncio.sleep(1.0))  # the call runs by now
    status, body, _ = rpc(
        host, "notifications/cancelled", {"requestId": 77, "reason": "test"}, id_=None, headers=h
    )
    assert (status, body) == (202, None)
    caller.join(10)
    assert not caller.is_alive(), "the cancelled call still runs"
    status, body, _ = outcome["answer"]
    assert status == 200 and body is None  # the stream ends with no answer
    assert rpc(host, "ping", headers=h)[0] == 200
