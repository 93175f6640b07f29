"""Key management routes, shaped like the Functions host's admin API (master key only).

* ``GET /admin/host/keys`` - the host function keys; ``GET|PUT|POST|DELETE
  /admin/host/keys/{name}`` - one of them (``_master`` is the master key);
* ``/admin/host/systemkeys[/{name}]`` - the system keys (``durabletask_extension``);
* ``/admin/functions/{function}/keys[/{name}]`` - the keys of one HTTP function.

``PUT`` sets a key to the ``value`` of its JSON body, or to a generated value when the body
has none (201 when the key is new, 200 when it replaced one); ``POST`` generates a new
value (rotation); ``DELETE`` revokes (204; 404 when there was no such key). Answers name
the key and carry its value: ``{"name", "value"}``, lists ``{"keys": [...]}``. The master
key and the Durable system key can be rotated, not deleted; a key set by a setting is 409.
The gate (``auth.Gate``) has already checked the master key before a request gets here.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from aiohttp import web

from durable_host.http.keys import KeyChangeError, Keys

MAX_BODY = 4096


def _error(status: int, error: str, message: str) -> web.Response:
    return web.json_response({"error": error, "message": message}, status=status)


async def _bounded_body(request: web.Request) -> bytes:
    if request.content_length is not None and request.content_length > MAX_BODY:
        raise KeyChangeError(413, f"A key request body holds at most {MAX_BODY} bytes.")
    body = b""
    while True:
        chunk = await request.content.read(MAX_BODY + 1 - len(body))
        if not chunk:
            return body
        body += chunk
        if len(body) > MAX_BODY:
            raise KeyChangeError(413, f"A key request body holds at most {MAX_BODY} bytes.")


async def _value_of(request: web.Request) -> str | None:
    body = await _bounded_body(request)
    if not body.strip():
        return None
    try:
        data = json.loads(body)
    except ValueError as exc:
        raise KeyChangeError(400, 'The body must be JSON: {"value": "..."}.') from exc
    if not isinstance(data, dict) or not isinstance(data.get("value", ""), str):
        raise KeyChangeError(400, "The body must be a JSON object with a string 'value'.")
    value = data.get("value")
    return value if value else None


class KeyRoutes:
    def __init__(self, keys: Keys, functions: Iterable[str]) -> None:
        self.keys = keys
        self.functions = {name.lower(): name for name in functions}

    def owns(self, path: str) -> bool:
        parts = path.strip("/").split("/")
        return path.startswith(("/admin/host/keys", "/admin/host/systemkeys")) or (
            len(parts) in (4, 5) and parts[:2] == ["admin", "functions"] and parts[3] == "keys"
        )

    async def handle(self, request: web.Request) -> web.Response:
        parts = request.path.strip("/").split("/")
        try:
            if parts[:2] == ["admin", "functions"]:
                function = self.functions.get(parts[2].lower())
                if function is None:
                    return _error(404, "not_found", f"No HTTP function named '{parts[2]}'.")
                return await self._scope(request, "function", parts[4:], function)
            scope = "host" if parts[2] == "keys" else "system"
            if parts[2] not in ("keys", "systemkeys") or len(parts) > 4:
                return _error(404, "not_found", f"No route for {request.path}")
            return await self._scope(request, scope, parts[3:], None)
        except KeyChangeError as exc:
            return _error(exc.status, "bad_request" if exc.status == 400 else "refused", str(exc))

    async def _scope(
        self, request: web.Request, scope: str, rest: list[str], function: str | None
    ) -> web.Response:
        method = request.method
        if not rest:
            if method != "GET":
                return _error(405, "method_not_allowed", "Use GET to list keys.")
            listed = await self.keys.list(scope, function)
            return web.json_response({"keys": [_key(n, v) for n, v in sorted(listed.items())]})
        name = rest[0]
        if method == "GET":
            value = await self.keys.get(scope, name, function)
            if value is None:
                return _error(404, "not_found", f"No key named '{name}'.")
            return web.json_response(_key(name, value))
        if method in ("PUT", "POST"):
            given = await _value_of(request) if method == "PUT" else None
            value, created = await self.keys.put(scope, name, given, function)
            return web.json_response(_key(name, value), status=201 if created else 200)
        if method == "DELETE":
            if not await self.keys.delete(scope, name, function):
                return _error(404, "not_found", f"No key named '{name}'.")
            return web.Response(status=204)
        return _error(405, "method_not_allowed", f"{method} is not supported here.")


def _key(name: str, value: str) -> dict[str, Any]:
    return {"name": name, "value": value}
