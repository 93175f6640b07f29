"""The Functions MCP extension on the host, driven by the official ``mcp`` SDK client: every
kind of tool, resource and prompt over Streamable HTTP and the legacy SSE transport, on each
store under test (``DURABLE_TEST_STORES``), keys off (loopback). Then bad input, by raw
JSON-RPC posts: the protocol's errors with a clear message, nothing run or written, the host
unharmed; and the cancellation of a running tool call. Last, durable functions behind MCP (a
SIGKILL between a tool's call and its orchestration's end) and one client session across two
hosts of one hub. The tests share the module's host per store (the crash test restarts it)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientSession

from tests.browser import DevTools, browser, needs_chromium  # noqa: F401 - browser: a fixture
from tests.harness import APPS, WEBHOOK, HostProcess, store_spec_for, store_specs, wait_for
from tests.host.mcp_checks import check_resources_and_prompts, check_tools
from tests.host.mcp_client import MCP, AlternatingProxy, SplitProxy, connect, rpc
from tests.screenshots import save, window

APP = APPS / "mcp"
LIMIT = 1024 * 1024


@pytest.fixture(scope="module", params=store_specs())
def host(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[HostProcess]:
    tmp: Path = tmp_path_factory.mktemp("mcp")
    # the host's request limit (the MCP endpoints share it), small so a test sends little
    # and its spans in a file (the console exporter), for the telemetry test
    env = {
        "DURABLE_HOST_MAX_REQUEST_BYTES": str(LIMIT),
        "OTEL_TRACES_EXPORTER": "console",
        "DURABLE_HOST_TELEMETRY_FILE": str(tmp / "telemetry.jsonl"),
    }
    proc = HostProcess(APP, store_spec_for(request.param, tmp), env=env).start()
    yield proc
    proc.stop()


def run(coro: Any) -> Any:
    return asyncio.run(coro)


@pytest.mark.parametrize("transport", ["http", "sse"])
def test_tools_listed_and_called_as_the_extension_serves_them(
    host: HostProcess, transport: str
) -> None:
    async def go() -> None:
        async with connect(host.base_url, transport) as client:
            await check_tools(client, transport)

    run(go())


@pytest.mark.parametrize("transport", ["http", "sse"])
def test_resources_and_prompts(host: HostProcess, transport: str) -> None:
    async def go() -> None:
        async with connect(host.base_url, transport) as client:
            await check_resources_and_prompts(client)

    run(go())


# --- bad input --------------------------------------------------------------------------


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
    # A cancellation of a request the host does not run (yet) is ignored, so it is sent
    # again until the call ends: however slowly the call reaches the host, it is cancelled.
    deadline = time.monotonic() + 20
    while caller.is_alive() and time.monotonic() < deadline:
        time.sleep(0.3)
        status, body, _ = rpc(
            host,
            "notifications/cancelled",
            {"requestId": 77, "reason": "test"},
            id_=None,
            headers=h,
        )
        assert (status, body) == (202, None)
        caller.join(0.5)
    assert not caller.is_alive(), "the cancelled call still runs"
    status, body, _ = outcome["answer"]
    assert status == 200 and body is None  # the stream ends with no answer
    assert rpc(host, "ping", headers=h)[0] == 200


def test_the_dashboard_lists_the_tools_resources_and_prompts(host: HostProcess) -> None:
    listed = host.get("/admin/dashboard/api/mcp").json()
    assert listed["endpoint"] == MCP
    tools = {t["name"]: t for t in listed["tools"]}
    assert tools["echo"]["function"] == "echo" and tools["hello"]["inputSchema"]["required"] == [
        "name"
    ]
    uris = {r.get("uri") or r.get("uriTemplate") for r in listed["resources"]}
    assert {"file://readme.md", "file://docs/{name}", "ui://widget/card.html"} <= uris
    assert {p["name"] for p in listed["prompts"]} == {"code_review", "conversation"}
    page = host.get("/admin/dashboard").body.decode()
    assert 'id="mcp-tools"' in page and "listMcp" in page


def test_each_call_is_a_span_under_the_callers_trace(host: HostProcess) -> None:
    trace_id, caller = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
    traced = {"traceparent": f"00-{trace_id}-{caller}-01"}
    assert (
        rpc(host, "tools/call", {"name": "hello", "arguments": {"name": "T"}}, headers=traced)[0]
        == 200
    )
    assert rpc(host, "tools/call", {"name": "fails"}, headers=traced)[0] == 200
    assert rpc(host, "prompts/get", {"name": "conversation"}, headers=traced)[0] == 200
    out = Path(host.env["DURABLE_HOST_TELEMETRY_FILE"])

    def spans() -> dict[str, dict[str, Any]] | None:
        if not out.exists():
            return None
        found = {}
        for line in out.read_text().splitlines():
            span = json.loads(line) if line.strip() else {}
            if span.get("context", {}).get("trace_id", "").removeprefix("0x") == trace_id:
                found[span["name"]] = span
        wanted = {"mcp tools/call hello", "mcp tools/call fails", "mcp prompts/get conversation"}
        return found if wanted <= set(found) else None

    found = wait_for(spans, 20, "the MCP spans")
    hello = found["mcp tools/call hello"]
    assert hello["parent_id"].removeprefix("0x") == caller
    assert hello["attributes"]["faas.invoked_name"] == "hello"
    assert hello["status"]["status_code"] == "UNSET"
    assert found["mcp tools/call fails"]["status"]["status_code"] == "ERROR"


@needs_chromium
def test_the_dashboards_mcp_view_in_a_browser(
    host: HostProcess,
    browser: DevTools,  # noqa: F811 - the fixture imported above
    tmp_path: Path,
) -> None:
    if not host.store.startswith("sqlite"):
        pytest.skip("the page is the same on every store: SQLite's host shows it")
    browser.open(f"{host.base_url}/admin/dashboard#/mcp")
    window(browser)
    tools = "[...document.querySelectorAll('#mcp-tools tr[data-tool]')].map(tr => tr.dataset.tool)"
    wait_for(lambda: "hello" in (browser.evaluate(tools) or []), 30, "the tools listed")
    hello = browser.evaluate("document.querySelector('#mcp-tools tr[data-tool=hello]').textContent")
    assert "Greets someone by name." in hello and "name*" in hello and "times" in hello
    resources = browser.evaluate(
        "[...document.querySelectorAll('#mcp-resources tr')].map(tr => tr.dataset.resource)"
    )
    assert "file://docs/{name}" in resources and "ui://widget/card.html" in resources
    prompt = browser.evaluate(
        "document.querySelector('#mcp-prompts tr[data-prompt=code_review]').textContent"
    )
    assert "code*" in prompt and "language" in prompt
    assert browser.evaluate("document.getElementById('mcp-endpoint').textContent").endswith(MCP)
    save(browser, tmp_path, "dashboard-mcp")


# --- durable functions behind MCP; one session across two hosts --------------------------


def tool_json(result: Any) -> dict[str, Any]:
    assert not result.is_error, result
    return json.loads(result.content[0].text)  # type: ignore[no-any-return]


def test_one_client_session_across_two_hosts(host: HostProcess) -> None:
    """A second host on the module host's hub, a proxy that sends each request to the other
    host: the session opened on one serves every later request on either (Azure Storage and
    PostgreSQL: SQLite is one host per file)."""
    if host.store.startswith("sqlite"):
        pytest.skip("SQLite is one host per file: two hosts share Azure or PostgreSQL hubs")
    other = HostProcess(APP, host.store, env=dict(host.env)).start()  # the same hub
    try:
        with AlternatingProxy([host.base_url, other.base_url]) as proxy:

            async def go() -> None:
                async with connect(proxy.base_url, mode="legacy") as client:
                    for i in range(4):  # each call on the other host than the one before
                        result = await client.call_tool("hello", {"name": f"n{i}"})
                        assert result.content[0].text == f"Hello, n{i}!"
                    echoed = await client.call_tool("echo", {"text": "t"})
                    assert json.loads(echoed.content[0].text)["session"] is True
                    assert (await client.read_resource("file://readme.md")).contents
                    waited = tool_json(await client.call_tool("countdown_and_wait", {"seconds": 0}))
                    assert waited["output"] == "done after 0s"

            run(go())
            assert all(n >= 3 for n in proxy.served.values()), proxy.served
    finally:
        other.stop()


def test_the_sse_transport_with_its_messages_posted_to_another_host(host: HostProcess) -> None:
    """The legacy SSE transport's stream held by one host, every message posted to another:
    the message reaches the holder through the hub's store (``triggers/mcp/relay.py``), whose
    answers arrive on the stream; once the holder is gone, a message is refused (400)."""
    if host.store.startswith("sqlite"):
        pytest.skip("SQLite is one host per file: two hosts share Azure or PostgreSQL hubs")
    other = HostProcess(APP, host.store, env=dict(host.env)).start()  # the same hub
    try:
        with SplitProxy(other.base_url, host.base_url) as proxy:

            async def go() -> None:
                async with connect(proxy.base_url, "sse") as client:
                    for i in range(3):
                        result = await client.call_tool("hello", {"name": f"s{i}"})
                        assert result.content[0].text == f"Hello, s{i}!"
                    assert (await client.read_resource("file://readme.md")).contents

            run(go())
            assert proxy.served[other.base_url] == 1, proxy.served  # the one stream
            assert proxy.served[host.base_url] >= 5, proxy.served  # initialize, calls...

        async def raw() -> str:
            async with (
                ClientSession() as http,
                http.get(other.base_url + MCP + "/sse") as stream,
            ):
                endpoint = await sse_data(stream)
                ping = {"jsonrpc": "2.0", "id": 7, "method": "ping"}
                posted = await http.post(f"{host.base_url}{MCP}/{endpoint}", json=ping)
                assert posted.status == 202
                answer = json.loads(await sse_data(stream))
                assert answer == {"jsonrpc": "2.0", "id": 7, "result": {}}
                return endpoint

        endpoint = run(raw())
    finally:
        assert other.stop() == 0

    async def after() -> tuple[int, str]:
        async with ClientSession() as http:
            ping = {"jsonrpc": "2.0", "id": 8, "method": "ping"}
            async with http.post(f"{host.base_url}{MCP}/{endpoint}", json=ping) as resp:
                return resp.status, await resp.text()

    status, body = run(after())  # the holder stopped: nobody to answer, nothing kept
    assert status == 400 and "No active session" in body, (status, body)


async def sse_data(stream: Any) -> str:
    """The data of the next SSE event on ``stream`` (keep-alive comments skipped)."""
    while True:
        line = (await stream.content.readline()).decode()
        if line.startswith("data: "):
            return line[len("data: ") :].strip()


def test_a_tool_runs_an_orchestration_that_survives_a_sigkill(host: HostProcess) -> None:
    """A tool with the ``durableClient`` binding starts an orchestration and returns its
    output (or its status); the one it started survives a SIGKILL of the host between the
    call and its end, and a tool on the restarted host reads its output. Last in the module:
    it restarts the module's host."""
    if not host.store.startswith(store_specs()[0]):
        pytest.skip("the first store under test is enough for the crash")

    async def start() -> str:
        async with connect(host.base_url) as client:
            waited = tool_json(await client.call_tool("countdown_and_wait", {"seconds": 0}))
            assert waited == {"runtimeStatus": "Completed", "output": "done after 0s"}
            started = tool_json(await client.call_tool("start_countdown", {"seconds": 2}))
            assert started["runtimeStatus"] in ("Pending", "Running")
            return str(started["id"])

    instance = run(start())
    host.kill()  # the countdown's timer is still running
    host.start()

    async def finished() -> dict[str, Any]:
        async with connect(host.base_url) as client:
            for _ in range(300):
                status = tool_json(
                    await client.call_tool("countdown_status", {"instance_id": instance})
                )
                if status["runtimeStatus"] == "Completed":
                    return status
                await asyncio.sleep(0.1)
        raise AssertionError(f"the countdown did not complete: {status}")

    assert run(finished())["output"] == "done after 2s"
