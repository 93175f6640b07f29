"""Assemble the host's single HTTP server: admin, management API, app functions.

One aiohttp application on one port serves ``/admin/host/status``, the management
webhooks, the SDK's RPC base (``rpcBaseUrl`` points back at this same port) and the
app's HTTP triggers. It also builds the durable client binding JSON the SDK expects.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

from durable_host.client import DurableClient
from durable_host.http.functions import FunctionRoutes
from durable_host.http.limits import Limits
from durable_host.http.management import RPC_BASE, WEBHOOK_BASE, ManagementApi, management_urls

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
    except Exception:
        log.exception("request %s %s failed", request.method, request.path)
        body = {"Message": "Something went wrong while processing your request"}
        return web.json_response(body, status=500)


def client_binding_json(base: str, rpc_base: str, hub: str) -> str:
    """The ``durableClient`` binding value (protocol §6.1) with this host's URLs."""
    urls = management_urls(base, hub, "INSTANCEID")
    root = f"{base}{WEBHOOK_BASE}"
    return json.dumps(
        {
            "taskHubName": hub,
            "connectionName": "Storage",
            "creationUrls": {
                "createNewInstancePostUri": f"{root}/orchestrators/{{functionName}}[/{{instanceId}}]",
                "createAndWaitOnNewInstancePostUri": f"{root}/orchestrators/{{functionName}}[/{{instanceId}}]?timeout={{timeoutInSeconds}}&pollingInterval={{intervalInSeconds}}",
            },
            "managementUrls": urls,
            "baseUrl": root,
            "requiredQueryStringParameters": "",
            "rpcBaseUrl": f"{rpc_base}{RPC_BASE}/",
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
    limits: Limits | None = None,
) -> web.Application:
    limits = limits or Limits()
    management = ManagementApi(client, hub, limits)

    def binding_for(request: web.Request | None) -> str:
        base = f"{request.scheme}://{request.host}" if request is not None else public_base()
        return client_binding_json(base, public_base(), hub)

    functions = FunctionRoutes(client.engine.index.http, binding_for, app_dir, limits)
    prefix = f"/{route_prefix}/" if route_prefix else "/"

    async def dispatch(request: web.Request) -> web.StreamResponse:
        path = request.path
        if path == "/admin/host/status":
            state = "Running" if is_running() else "Stopping"
            return web.json_response({"state": state})
        if path == "/admin/host/metrics":
            return web.json_response(client.engine.metrics())
        for base in (WEBHOOK_BASE, RPC_BASE):
            if path == base or path.startswith(base + "/"):
                return await management.handle(request, path[len(base):])
        if path.startswith(prefix) or (not route_prefix):
            return await functions.handle(request, path[len(prefix):])
        return web.json_response({"error": "not_found", "message": f"No route for {path}"}, status=404)

    app = web.Application(client_max_size=limits.max_request_bytes, middlewares=[_errors_as_json])
    # Every path, newlines included (a ``.`` pattern would leave "%0A" to aiohttp's text 404).
    app.router.add_route("*", r"/{tail:[\s\S]*}", dispatch)
    return app
