"""Durable functions behind MCP, and one MCP client session across two hosts.

* A tool with the ``durableClient`` binding starts an orchestration and returns its output
  (or its status); the orchestration a tool started survives a SIGKILL of the host between
  the call and its end, and a later tool call on the restarted host reads its output.
* Two hosts on one task hub behind a proxy that sends each request to the other host: the
  session the client opened on one host serves every later request on either (on Azure
  Storage and PostgreSQL when under test: SQLite is one host per file).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import uuid
from pathlib import Path
from typing import Any, Self

import pytest
from aiohttp import ClientSession, web

from tests.harness import APPS, HostProcess, store_spec_for, store_specs
from tests.host.mcp_client import connect

APP = APPS / "mcp"


@pytest.fixture(params=store_specs()[:1])
def store(request: pytest.FixtureRequest) -> str:
    """The first store under test only: the two-host test below runs durable tools on Azure."""
    return str(request.param)


def tool_json(result: Any) -> dict[str, Any]:
    assert not result.is_error, result
    return json.loads(result.content[0].text)  # type: ignore[no-any-return]


def test_a_tool_runs_an_orchestration_that_survives_a_sigkill(store: str, tmp_path: Path) -> None:
    host = HostProcess(APP, store_spec_for(store, tmp_path)).start()
    try:

        async def start() -> str:
            async with connect(host.base_url) as client:
                waited = tool_json(await client.call_tool("countdown_and_wait", {"seconds": 0}))
                assert waited == {"runtimeStatus": "Completed", "output": "done after 0s"}
                started = tool_json(await client.call_tool("start_countdown", {"seconds": 2}))
                assert started["runtimeStatus"] in ("Pending", "Running")
                return str(started["id"])

        instance = asyncio.run(start())
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

        assert asyncio.run(finished())["output"] == "done after 2s"
    finally:
        host.stop()


class AlternatingProxy:
    """A reverse proxy on loopback that sends each request to the next of its upstreams."""

    def __init__(self, upstreams: list[str]) -> None:
        self.upstreams = itertools.cycle(upstreams)
        self.served: dict[str, int] = {u: 0 for u in upstreams}
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.base_url = ""

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._serve())
        self.ready.set()
        self.loop.run_forever()

    async def _serve(self) -> None:
        self.session = ClientSession()
        app = web.Application(client_max_size=16 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._forward)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.base_url = f"http://127.0.0.1:{port}"

    async def _forward(self, request: web.Request) -> web.Response:
        upstream = next(self.upstreams)
        self.served[upstream] += 1
        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host",)}
        async with self.session.request(
            request.method,
            upstream + str(request.rel_url),
            headers=headers,
            data=await request.read(),
        ) as resp:
            body = await resp.read()
            keep = {
                k: v
                for k, v in resp.headers.items()
                if k.lower() not in ("content-length", "transfer-encoding", "content-encoding")
            }
            return web.Response(status=resp.status, body=body, headers=keep)

    def __enter__(self) -> Self:
        self.thread.start()
        self.ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        async def close() -> None:
            await self.session.close()
            await self.runner.cleanup()

        asyncio.run_coroutine_threadsafe(close(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


SHARED_STORES = [s for s in store_specs() if s != "sqlite"] or ["azure"]


@pytest.mark.parametrize("shared", SHARED_STORES)
def test_one_client_session_across_two_hosts(shared: str) -> None:
    if shared not in store_specs():
        pytest.skip("two hosts share a hub on Azure or PostgreSQL (DURABLE_TEST_STORES=...,azure)")
    hub = {"DURABLE_HOST_HUB": "Mcp" + uuid.uuid4().hex[:12]}
    hosts = [HostProcess(APP, shared, env=dict(hub)).start() for _ in range(2)]
    try:
        with AlternatingProxy([h.base_url for h in hosts]) as proxy:

            async def go() -> None:
                async with connect(proxy.base_url, mode="legacy") as client:
                    for i in range(4):  # each call on the other host than the one before
                        result = await client.call_tool("hello", {"name": f"n{i}"})
                        assert result.content[0].text == f"Hello, n{i}!"
                    echoed = json.loads(
                        (await client.call_tool("echo", {"text": "t"})).content[0].text
                    )
                    assert echoed["session"] is True
                    assert (await client.read_resource("file://readme.md")).contents
                    waited = tool_json(await client.call_tool("countdown_and_wait", {"seconds": 0}))
                    assert waited["output"] == "done after 0s"

            asyncio.run(go())
            assert all(n >= 3 for n in proxy.served.values()), proxy.served
    finally:
        for h in hosts:
            h.stop()
