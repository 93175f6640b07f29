"""CORS for browsers calling the host from another origin, as ``func start --cors`` allows.

Only what Core Tools offers locally: a list of allowed origins (``*`` for any) and whether
credentials are allowed. A preflight (``OPTIONS`` with ``Access-Control-Request-Method``)
from an allowed origin is answered here, before auth and routing, because browsers send it
without keys; every other answer to an allowed origin carries the allow headers.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def middleware(
    origins: tuple[str, ...], credentials: bool
) -> Callable[..., Awaitable[web.StreamResponse]]:
    any_origin = "*" in origins

    def allowed(origin: str | None) -> bool:
        return bool(origin and (any_origin or origin.rstrip("/") in origins))

    def headers(origin: str) -> dict[str, str]:
        # With credentials a browser refuses "*", so the origin itself is echoed.
        value = origin if credentials or not any_origin else "*"
        out = {"Access-Control-Allow-Origin": value, "Vary": "Origin"}
        if credentials:
            out["Access-Control-Allow-Credentials"] = "true"
        return out

    @web.middleware
    async def cors(request: web.Request, handler: Handler) -> web.StreamResponse:
        origin = request.headers.get("Origin")
        if not allowed(origin):
            return await handler(request)
        assert origin is not None
        if request.method == "OPTIONS" and "Access-Control-Request-Method" in request.headers:
            extra = {
                "Access-Control-Allow-Methods": "GET, POST, PUT, PATCH, DELETE, HEAD, OPTIONS",
                "Access-Control-Allow-Headers": request.headers.get(
                    "Access-Control-Request-Headers", "*"
                ),
                "Access-Control-Max-Age": "600",
            }
            return web.Response(status=204, headers={**headers(origin), **extra})
        response = await handler(request)
        response.headers.update(headers(origin))
        return response

    return cors
