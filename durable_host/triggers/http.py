"""The app's HTTP-triggered functions, served at ``/{routePrefix}/{route}``.

Route templates follow Azure Functions: ``{name}``, optional ``{name?}``, constrained
``{name:int}`` (the constraint is checked for ``int``/``bool``/``alpha``/``guid``), and a
catch-all ``{*rest}``. A function without ``methods`` accepts every method. The
request becomes a ``func.HttpRequest``; a returned ``func.HttpResponse`` or ``str``
becomes the response, as the worker does.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import azure.functions as func
from aiohttp import web

from durable_host.engine.client import ClientError
from durable_host.functions import invocation
from durable_host.functions.loader import FunctionInfo
from durable_host.http.limits import Limits, read_body
from durable_host.ops import telemetry

log = logging.getLogger("durable_host.http")
_CONSTRAINTS = {
    "int": r"-?\d+",
    "bool": r"(?i:true|false)",
    "alpha": r"[A-Za-z]+",
    "guid": r"[0-9A-Fa-f]{8}-?(?:[0-9A-Fa-f]{4}-?){3}[0-9A-Fa-f]{12}",
}


@dataclass(frozen=True, slots=True)
class Route:
    pattern: re.Pattern[str]
    methods: frozenset[str] | None
    info: FunctionInfo


def compile_route(template: str) -> re.Pattern[str]:
    out = ""
    for piece in re.split(r"(\{[^}]+\})", template.strip("/")):
        if not (piece.startswith("{") and piece.endswith("}")):
            out += re.escape(piece)
            continue
        spec = piece[1:-1]
        catch_all = spec.startswith("*")
        optional = spec.endswith("?")
        name, _, constraint = spec.lstrip("*").rstrip("?").partition(":")
        body = ".*" if catch_all else _CONSTRAINTS.get(constraint.split("(")[0], "[^/]+")
        group = f"(?P<{name}>{body})"
        if optional or catch_all:
            if out.endswith("/"):
                out = out[:-1] + f"(?:/{group})?"
                continue
            group += "?"
        out += group
    return re.compile(f"^{out}/?$", re.IGNORECASE)


def build_routes(functions: list[FunctionInfo]) -> list[Route]:
    routes = []
    for info in functions:
        trigger = info.trigger()
        methods = trigger.get("methods")
        routes.append(
            Route(
                compile_route(trigger.get("route") or info.name),
                frozenset(m.upper() for m in methods) if methods else None,
                info,
            )
        )
    # Literal segments win over parameters, as in ASP.NET routing.
    routes.sort(key=lambda r: r.pattern.pattern.count("(?P<"))
    return routes


Authorize = Callable[[web.Request, FunctionInfo], Awaitable[web.StreamResponse | None]]


class FunctionRoutes:
    def __init__(
        self,
        functions: list[FunctionInfo],
        client_json: Callable[[web.Request], str],
        app_dir: str,
        authorize: Authorize | None = None,
        public_base: Callable[[], str] | None = None,
        limits: Limits | None = None,
    ):
        """``authorize`` refuses a request for a matched function (its auth level);
        ``public_base`` is the origin of the URL functions see (never the ``Host`` header)."""
        self.routes = build_routes(functions)
        self.client_json = client_json
        self.app_dir = app_dir
        self.authorize = authorize
        self.public_base = public_base
        self.limits = limits or Limits()

    async def handle(self, request: web.Request, path: str) -> web.StreamResponse:
        allowed = False
        for route in self.routes:
            match = route.pattern.match(path)
            if match is None:
                continue
            if route.info.disabled:
                continue  # a disabled function does not exist, as on the Functions host
            allowed = True
            if route.methods is not None and request.method not in route.methods:
                continue
            if self.authorize is not None:
                denied = await self.authorize(request, route.info)
                if denied is not None:
                    return denied
            params = {k: v for k, v in match.groupdict().items() if v is not None}
            return await self._invoke(route.info, request, params)
        status = 405 if allowed else 404
        return web.Response(status=status)

    async def _invoke(
        self, info: FunctionInfo, request: web.Request, params: dict[str, str]
    ) -> web.StreamResponse:
        try:
            body = await read_body(
                request, self.limits.max_request_bytes, "request body", self.limits
            )
        except ClientError as error:
            # The body is the app's to parse; the host only bounds its size and read time.
            kind = "request_too_large" if error.status == 413 else "request_timeout"
            return web.json_response({"error": kind, "message": error.message}, status=error.status)
        req = func.HttpRequest(
            method=request.method,
            url=self.public_base() + str(request.rel_url) if self.public_base else str(request.url),
            headers=dict(request.headers),
            params=dict(request.query),
            route_params=params,
            body=body,
        )
        kwargs = invocation.build_kwargs(info, req, lambda: self.client_json(request), self.app_dir)
        try:
            result = await telemetry.run_function(  # the call's span, current while it runs
                info.name,
                info.trigger().get("route") or info.name,
                request.method,
                invocation.call(info.fn, kwargs),
            )
        except Exception:
            log.exception("HTTP function %s failed", info.name)
            return web.json_response(
                {
                    "error": "function_failed",
                    "message": f"The function '{info.name}' raised an exception.",
                },
                status=500,
            )
        return to_response(result)


def to_response(result: object) -> web.StreamResponse:
    if result is None:
        return web.Response(status=204)
    if isinstance(result, str):
        return web.Response(text=result, content_type="text/plain")
    if isinstance(result, func.HttpResponse):
        headers = {k: v for k, v in result.headers.items()}
        if not any(k.lower() == "content-type" for k in headers):
            mimetype = result.mimetype or "text/plain"
            headers["Content-Type"] = (
                f"{mimetype}; charset={result.charset}"
                if mimetype.startswith("text/")
                else mimetype
            )
        return web.Response(status=result.status_code, body=result.get_body(), headers=headers)
    return web.Response(status=500, text="The function returned an unsupported value.")
