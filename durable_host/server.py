"""Assemble the host's single HTTP server: admin, management API, app functions.

One aiohttp application on one port serves ``/admin/host/status``, the management
webhooks, the SDK's RPC base (``rpcBaseUrl`` points back at this same port) and the
app's HTTP triggers and, when the app declares any, the MCP extension's endpoints
(``triggers.mcp``). It also builds the durable client binding JSON the SDK expects.
Who may call which route is ``auth.Gate``'s decision (``docs/security.md``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from durable_host.cluster import scale
from durable_host.dashboard import Dashboard
from durable_host.engine.client import DurableClient
from durable_host.http.auth import Gate, loggable
from durable_host.http.key_routes import KeyRoutes
from durable_host.http.limits import Limits
from durable_host.ops import telemetry
from durable_host.store.base import StoreError
from durable_host.triggers.durable import RPC_BASE, WEBHOOK_BASE, ManagementApi, management_urls
from durable_host.triggers.http import FunctionRoutes
from durable_host.triggers.mcp import McpRoutes
from durable_host.triggers.storage.scale import merge as storage_scale

log = logging.getLogger("durable_host.http")
MAX_REQUEST = Limits().max_request_bytes  # bodies are read by limits.read_body, bounded there


@web.middleware
async def _errors_as_json(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Every answer is empty or JSON: the SDK parses every response body as JSON."""
    try:
        return await handler(request)
    except web.HTTPRequestEntityTooLarge:
        body = {"Message": f"The request body exceeds the limit of {MAX_REQUEST} bytes."}
        return web.json_response(body, status=413)
    except web.HTTPException:
        raise
    except StoreError as exc:
        # The storage failed, not the request: the client may retry it as it is.
        log.error("request %s %s: storage failed: %s", request.method, request.path, exc)
        body = {"error": "store_unavailable", "Message": f"The task hub's storage failed: {exc}"}
        return web.json_response(body, status=503, headers={"Retry-After": "1"})
    except Exception:
        log.exception("request %s %s failed", request.method, loggable(request.path))
        body = {"Message": "Something went wrong while processing your request"}
        return web.json_response(body, status=500)


def client_binding_json(
    base: str, rpc_base: str, hub: str, code: str | None = None, rpc_segment: str | None = None
) -> str:
    """The ``durableClient`` binding value (protocol §6.1) with this host's URLs: links on
    the public ``base`` with ``code=`` (the system key) when auth is on, as the extension
    builds them; ``rpcBaseUrl`` on the local ``rpc_base``, its path carrying the RPC secret
    when auth is on (the SDK appends to it, so it cannot carry a query)."""
    urls = management_urls(base, hub, "INSTANCEID", code)
    root = f"{base}{WEBHOOK_BASE}"
    q = f"code={code}" if code else ""
    rpc = f"{rpc_base}{RPC_BASE}/" + (f"{rpc_segment}/" if rpc_segment else "")
    return json.dumps(
        {
            "taskHubName": hub,
            "connectionName": "Storage",
            "creationUrls": {
                "createNewInstancePostUri": f"{root}/orchestrators/{{functionName}}[/{{instanceId}}]"
                + (f"?{q}" if q else ""),
                "createAndWaitOnNewInstancePostUri": f"{root}/orchestrators/{{functionName}}[/{{instanceId}}]?timeout={{timeoutInSeconds}}&pollingInterval={{intervalInSeconds}}"
                + (f"&{q}" if q else ""),
            },
            "managementUrls": urls,
            "baseUrl": root,
            "requiredQueryStringParameters": q,
            "rpcBaseUrl": rpc,
        }
    )


def build_app(
    client: DurableClient,
    *,
    hub: str,
    route_prefix: str,
    app_dir: str,
    public_base: Callable[[], str],
    is_running: Callable[[], bool],
    local_base: Callable[[], str] | None = None,
    gate: Gate | None = None,
    key_routes: KeyRoutes | None = None,
    limits: Limits | None = None,
    dashboard: Dashboard | None = None,
    storage: Any = None,
    mcp: McpRoutes | None = None,
) -> web.Application:
    """``public_base``: the origin of every link; ``local_base``: that of ``rpcBaseUrl``;
    ``storage``: the Storage extension (``triggers/storage``), whose queue and blob backlog
    joins the scale signal."""
    gate = gate or Gate(None, enabled=False)
    limits = limits or Limits()
    management = ManagementApi(client, hub, public_base, gate.link_code, limits)

    def binding_for(_request: web.Request | None) -> str:
        rpc_base = (local_base or public_base)()
        return client_binding_json(public_base(), rpc_base, hub, gate.link_code(), gate.rpc_segment)

    functions = FunctionRoutes(
        client.engine.index.http, binding_for, app_dir, gate.admit_function, public_base, limits
    )
    prefix = f"/{route_prefix}/" if route_prefix else "/"

    async def dispatch(request: web.Request) -> web.StreamResponse:
        denied, path = await gate.admit(request)
        if denied is not None:
            return denied
        if path == "/admin/host/status":
            state = "Running" if is_running() else "Stopping"
            body: dict[str, object] = {"state": state}
            partitions = scale.owned(client.store)
            if partitions is not None:  # a hub several hosts share: this host's part of it
                body["partitions"] = partitions
            return web.json_response(body)
        if path == "/admin/host/scale":
            if request.method != "GET":
                return web.json_response(
                    {"error": "method_not_allowed", "message": "use GET"}, status=405
                )
            now = datetime.now(UTC)
            answer = await scale.answer(client.engine, now)
            if storage is not None:
                answer = storage_scale(answer, await storage.backlog(now))
            return web.json_response(answer)
        if path == "/admin/host/metrics":
            return web.json_response(client.engine.metrics())
        if key_routes is not None and key_routes.owns(path):
            return await key_routes.handle(request)
        if mcp is not None and mcp.owns(path):
            return await mcp.handle(request, path)
        if dashboard is not None and dashboard.owns(path):
            return await dashboard.handle(request, path)
        for base in (WEBHOOK_BASE, RPC_BASE):
            if path == base or path.startswith(base + "/"):
                return await management.handle(request, path[len(base) :])
        if path.startswith(prefix) or (not route_prefix):
            return await functions.handle(request, path[len(prefix) :])
        return web.json_response(
            {"error": "not_found", "message": f"No route for {path}"}, status=404
        )

    # telemetry: a request's traceparent is the current context while it is handled
    middlewares = [_errors_as_json, telemetry.extract_context]
    app = web.Application(client_max_size=limits.max_request_bytes, middlewares=middlewares)
    # Every path, newlines included (a ``.`` pattern would leave "%0A" to aiohttp's text 404).
    app.router.add_route("*", r"/{tail:[\s\S]*}", dispatch)
    return app
