"""The MCP endpoints behind the extension's keys: the ``mcp_extension`` system key (listed
by ``durable-host keys``) in ``x-functions-key`` or ``code``, the master key, 401 without
one or with a wrong one, ``webhookAuthorizationLevel: anonymous`` opening them, and the SSE
transport announcing its message endpoint with the ``code`` on.

Also a client nobody here wrote, in another language: the MCP Inspector's command-line mode
(``@modelcontextprotocol/inspector``, pinned in ``package.json``; ``npm ci`` installs it),
with the key in a header, over both transports."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import APPS, ROOT, HostProcess, store_spec_for
from tests.host.mcp_checks import check_resources_and_prompts, check_tools
from tests.host.mcp_client import MCP, connect, rpc
from tests.host.test_auth import keys_of

APP = APPS / "mcp"
INSPECTOR = ROOT / "node_modules" / ".bin" / "mcp-inspector"


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostProcess]:
    tmp: Path = tmp_path_factory.mktemp("mcpkeys")
    # and JSON answers on Streamable HTTP (the keys-off tests get SSE events): every SDK client
    # test here reads them
    json_answers = {"DURABLE_HOST_MCP_RESPONSE": "json"}
    proc = HostProcess(
        APP, store_spec_for("sqlite", tmp), env=json_answers, args=["--auth", "keys"]
    ).start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def keys(secured: HostProcess) -> dict[str, Any]:
    return keys_of(secured)


def mcp_key(keys: dict[str, Any]) -> str:
    return next(k["value"] for k in keys["system"] if k["name"] == "mcp_extension")


def test_the_mcp_endpoints_need_the_mcp_extension_key(
    secured: HostProcess, keys: dict[str, Any]
) -> None:
    key = mcp_key(keys)
    durable = next(k["value"] for k in keys["system"] if k["name"] == "durabletask_extension")
    function = next(k["value"] for k in keys["host"] if k["name"] == "default")
    for headers in (
        {},
        {"x-functions-key": "w" * 43},
        {"x-functions-key": durable},
        {"x-functions-key": function},
    ):
        status, body, _ = rpc(secured, "tools/list", headers=headers)
        assert status == 401, (headers, status)
        assert body is not None and "mcp_extension" in body["message"]
    for path in (f"{MCP}/sse", f"{MCP}/message?azmcpcs=x"):
        assert secured.request("GET" if path.endswith("sse") else "POST", path).status == 401
    status, answer, headers = rpc(secured, "tools/list", headers={"x-functions-key": key})
    assert status == 200 and headers["Content-Type"].startswith("application/json")
    assert answer is not None and answer["result"]["tools"]
    master = keys["master"]["value"]
    assert rpc(secured, "tools/list", headers={"x-functions-key": master})[0] == 200
    resp = secured.request(
        "POST",
        f"{MCP}?code={key}",
        raw=b'{"jsonrpc":"2.0","id":1,"method":"ping"}',
        headers={"Accept": "application/json, text/event-stream"},
    )
    assert resp.status == 200

    async def go() -> None:
        for transport in ("http", "sse"):
            for via in ("header", "query"):
                async with connect(secured.base_url, transport, key, via=via) as client:
                    result = await client.call_tool("hello", {"name": via})
                    assert result.content[0].text == f"Hello, {via}!"
                    if via == "header":  # every kind, with the key
                        await check_tools(client, transport)
                        await check_resources_and_prompts(client)

    asyncio.run(go())


def test_the_sse_endpoint_announces_its_message_endpoint_with_the_code(
    secured: HostProcess, keys: dict[str, Any]
) -> None:
    key = mcp_key(keys)
    with urllib.request.urlopen(f"{secured.base_url}{MCP}/sse?code={key}", timeout=10) as stream:
        assert stream.headers["Content-Type"].startswith("text/event-stream")
        assert stream.readline().decode() == "event: endpoint\n"
        data = stream.readline().decode()
    assert data.startswith("data: message?azmcpcs=")
    assert data.rstrip("\n").endswith(f"&code={key}")


def test_anonymous_webhook_level_opens_the_mcp_endpoints(tmp_path: Path) -> None:
    app = tmp_path / "app"
    shutil.copytree(APP, app, ignore=shutil.ignore_patterns(".durable", "__pycache__"))
    host_json = json.loads((app / "host.json").read_text())
    host_json["extensions"]["mcp"]["system"] = {"webhookAuthorizationLevel": "anonymous"}
    (app / "host.json").write_text(json.dumps(host_json))
    proc = HostProcess(app, store_spec_for("sqlite", tmp_path), args=["--auth", "keys"]).start()
    try:
        assert rpc(proc, "tools/list")[0] == 200
        # only the MCP endpoints: the management API still needs its key
        assert proc.get("/runtime/webhooks/durabletask/instances").status == 401
    finally:
        proc.stop()


def inspector(url: str, key: str, *args: str) -> Any:
    """One MCP Inspector CLI call; its JSON answer."""
    if not INSPECTOR.exists():
        pytest.skip("the MCP Inspector is not installed: run `npm ci` (package.json pins it)")
    out = subprocess.run(
        [str(INSPECTOR), "--cli", url, "--header", f"x-functions-key: {key}", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(out.stdout)


def test_the_mcp_inspector_cli_uses_every_kind(secured: HostProcess, keys: dict[str, Any]) -> None:
    key = mcp_key(keys)
    http, sse = f"{secured.base_url}{MCP}", f"{secured.base_url}{MCP}/sse"
    called = inspector(
        http, key, "--method", "tools/call", "--tool-name", "hello", "--tool-arg", "name=Inspector"
    )
    assert called["content"] == [{"type": "text", "text": "Hello, Inspector!"}]
    read = inspector(
        sse, key, "--transport", "sse", "--method", "resources/read", "--uri", "file://docs/a.md"
    )
    assert read["contents"][0]["text"] == "document a.md"
    prompt = inspector(
        http,
        key,
        "--method",
        "prompts/get",
        "--prompt-name",
        "code_review",
        "--prompt-args",
        "code=x = 1",
    )
    assert prompt["messages"][0]["content"]["text"] == "Review this python code:\nx = 1"
