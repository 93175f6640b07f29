"""Drive a host's MCP endpoints from tests: the official ``mcp`` SDK client over either
transport, and raw JSON-RPC posts for what a well-behaved client never sends."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Self

import aiohttp
import httpx2
from aiohttp import ClientSession, web
from mcp import Client
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client

from tests.harness import HostProcess

MCP = "/runtime/webhooks/mcp"
ACCEPT = "application/json, text/event-stream"


@asynccontextmanager
async def connect(
    base_url: str,
    transport: str = "http",
    key: str | None = None,
    *,
    via: str = "header",
    mode: str = "auto",
) -> AsyncIterator[Client]:
    """An initialized SDK client on ``base_url``'s MCP server; ``key`` goes in
    ``x-functions-key`` (``via="header"``) or the ``code`` query (``via="query"``). ``mode``
    ``auto`` probes the 2026 protocol's ``server/discover`` first (this server answers
    -32601, so the client falls back to ``initialize``); the SSE transport is handshake-era."""
    headers = {"x-functions-key": key} if key and via == "header" else {}
    query = f"?code={key}" if key and via == "query" else ""
    if transport == "http":
        http = httpx2.AsyncClient(headers=headers, timeout=30)
        async with (
            http,
            Client(streamable_http_client(f"{base_url}{MCP}{query}", http_client=http)) as c,
        ):
            yield c
    else:
        url = f"{base_url}{MCP}/sse{query}"
        async with Client(sse_client(url, headers=headers), mode="legacy") as c:
            yield c


def rpc(
    host: HostProcess,
    method: str,
    params: dict[str, Any] | None = None,
    *,
    id_: Any = 1,
    headers: dict[str, str] | None = None,
    raw: bytes | None = None,
) -> tuple[int, dict[str, Any] | None, dict[str, str]]:
    """One POST to the Streamable HTTP endpoint: the status, the JSON-RPC answer (from the
    SSE event or the JSON body; None when empty) and the headers."""
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if id_ is not None:
        message["id"] = id_
    if params is not None:
        message["params"] = params
    body = raw if raw is not None else json.dumps(message).encode()
    resp = host.request("POST", MCP, raw=body, headers={"Accept": ACCEPT, **(headers or {})})
    return resp.status, answer_of(resp.body), resp.headers


def answer_of(body: bytes) -> dict[str, Any] | None:
    text = body.decode()
    if not text.strip():
        return None
    for line in text.splitlines():
        if line.startswith("data: "):
            return json.loads(line[len("data: ") :])  # type: ignore[no-any-return]
    return json.loads(text)  # type: ignore[no-any-return]


class AlternatingProxy:
    """A reverse proxy on loopback that sends each request to the next of its upstreams."""

    def __init__(self, upstreams: list[str]) -> None:
        self.upstreams = itertools.cycle(upstreams)
        self.served: dict[str, int] = {u: 0 for u in upstreams}
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.base_url = ""
        self.streams: set[aiohttp.ClientResponse] = set()

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

    def pick(self, request: web.Request) -> str:
        return next(self.upstreams)

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        upstream = self.pick(request)
        self.served[upstream] += 1
        if request.method == "GET" and request.path.endswith("/sse"):
            return await self._stream(request, upstream)
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

    async def _stream(self, request: web.Request, upstream: str) -> web.StreamResponse:
        """An SSE stream passed on as it comes (the legacy transport's ``GET .../sse``)."""
        headers = {k: v for k, v in request.headers.items() if k.lower() != "host"}
        async with self.session.get(upstream + str(request.rel_url), headers=headers) as resp:
            self.streams.add(resp)  # closed by __exit__: the host keeps its stream open
            out = web.StreamResponse(
                status=resp.status,
                headers={"Content-Type": resp.headers.get("Content-Type", "text/event-stream")},
            )
            await out.prepare(request)
            with contextlib.suppress(aiohttp.ClientError):
                async for chunk in resp.content.iter_any():
                    await out.write(chunk)
            self.streams.discard(resp)
            return out

    def __enter__(self) -> Self:
        self.thread.start()
        self.ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        async def close() -> None:
            for resp in list(self.streams):
                resp.close()
            await self.session.close()
            await self.runner.cleanup()

        asyncio.run_coroutine_threadsafe(close(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


class SplitProxy(AlternatingProxy):
    """The legacy SSE transport split across two hosts: each stream (``GET .../sse``) to the
    first upstream, every other request to the second."""

    def __init__(self, stream_host: str, message_host: str) -> None:
        super().__init__([stream_host, message_host])
        self.stream_host, self.message_host = stream_host, message_host

    def pick(self, request: web.Request) -> str:
        return self.stream_host if request.method == "GET" else self.message_host
