"""The MCP server's JSON-RPC methods over the app's catalog, whatever the transport.

``Server.handle(message, origin)`` answers one JSON-RPC message: a response (a ``result``
or an ``error``) for a request, None for a notification or a response. What it answers, as
the extension (with the MCP C# SDK under it) does:

* ``initialize``: the server's name, version and instructions from host.json
  ``extensions.mcp`` (``serverName``, default ``Azure Functions MCP server``;
  ``serverVersion``, default ``1.0.0``; ``instructions``), the capabilities ``tools``,
  ``resources`` and ``prompts``, and the protocol version: the client's when this server
  speaks it (``PROTOCOL_VERSIONS``), else the newest it speaks;
* ``ping``; ``tools/list``, ``tools/call``; ``resources/list``, ``resources/templates/list``,
  ``resources/read``; ``prompts/list``, ``prompts/get``;
* ``notifications/initialized`` and every other notification are accepted;
  ``notifications/cancelled`` cancels the named request if it runs on this host;
* an unknown tool, resource or prompt is ``-32602`` (``Unknown tool: 'x'``); a required tool
  property or prompt argument that is missing or null is ``-32602`` naming them all; an
  unknown method ``-32601``; a message that is not a JSON-RPC 2.0 request ``-32600``.

A function that raises makes a tool result with ``isError`` and the exception's type and
message (never its traceback, which goes to the host's log); for a resource or a prompt, which
have no error result, it is ``-32603`` with the same text.

Nothing here writes to the task hub: a refused message changes nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from durable_host.ops import telemetry
from durable_host.triggers.mcp import results
from durable_host.triggers.mcp.calls import Caller, transport
from durable_host.triggers.mcp.catalog import Catalog

log = logging.getLogger("durable_host.mcp")

PROTOCOL_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")  # newest first
PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL_ERROR = (
    -32700,
    -32600,
    -32601,
    -32602,
    -32603,
)


class RpcError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


DEFAULT_NAME, DEFAULT_VERSION = "Azure Functions MCP server", "1.0.0"


@dataclass(frozen=True)
class Settings:
    """host.json ``extensions.mcp``."""

    server_name: str = DEFAULT_NAME
    server_version: str = DEFAULT_VERSION
    instructions: str | None = None
    anonymous: bool = False  # system.webhookAuthorizationLevel: anonymous

    @classmethod
    def from_host_json(cls, data: Mapping[str, Any]) -> Settings:
        mcp = ((data.get("extensions") or {}).get("mcp")) or {}
        system = mcp.get("system") or {}
        level = str(system.get("webhookAuthorizationLevel") or "").strip().lower()
        return cls(
            str(mcp.get("serverName") or DEFAULT_NAME),
            str(mcp.get("serverVersion") or DEFAULT_VERSION),
            mcp.get("instructions"),
            level == "anonymous",
        )


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a message came from: the transport, the client's session, the request's headers."""

    transport: str  # http-streamable | http-sse
    session_id: str | None
    headers: Mapping[str, str] = field(default_factory=dict)


def error(id_: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "error": {"code": code, "message": message}}


def check_message(message: Any) -> str | None:
    """Why ``message`` is not a JSON-RPC 2.0 message, or None."""
    if not isinstance(message, dict):
        return "a JSON-RPC message is a JSON object (batches are not supported)"
    if message.get("jsonrpc") != "2.0":
        return 'the message has no "jsonrpc": "2.0"'
    if "method" in message:
        if not isinstance(message["method"], str):
            return "the method is not a string"
        if "params" in message and not isinstance(message["params"], dict | None):
            return "params is not an object"
    elif "result" not in message and "error" not in message:
        return "the message is neither a request, a notification nor a response"
    if (
        "id" in message
        and not isinstance(message["id"], str | int)
        or isinstance(message.get("id"), bool)
    ):
        return "the id is not a string or an integer"
    return None


class Server:
    def __init__(self, catalog: Catalog, caller: Caller, settings: Settings) -> None:
        self.catalog = catalog
        self.caller = caller
        self.settings = settings
        self.calls = 0  # function calls served (tools, resources, prompts)
        self._inflight: dict[tuple[str | None, Any], asyncio.Task[Any]] = {}

    async def handle(self, message: dict[str, Any], origin: Origin) -> dict[str, Any] | None:
        if "method" not in message:
            return None  # a response to a request this server never sends
        method = message["method"]
        params = message.get("params") or {}
        if "id" not in message:
            self._notified(method, params, origin)
            return None
        id_ = message["id"]
        task = asyncio.current_task()
        key = (origin.session_id, id_)
        if task is not None:
            self._inflight[key] = task
        try:
            result = await self._dispatch(method, params, origin)
        except RpcError as exc:
            return error(id_, exc.code, exc.message)
        finally:
            if self._inflight.get(key) is task:
                self._inflight.pop(key, None)
        return {"jsonrpc": "2.0", "id": id_, "result": result}

    def _notified(self, method: str, params: dict[str, Any], origin: Origin) -> None:
        if method == "notifications/cancelled":
            task = self._inflight.pop((origin.session_id, params.get("requestId")), None)
            if task is not None:
                log.info("MCP request %r cancelled by the client", params.get("requestId"))
                task.cancel()

    async def _dispatch(self, method: str, params: dict[str, Any], origin: Origin) -> Any:
        if method == "initialize":
            return self._initialize(params)
        if method == "ping":
            return {}
        if method == "tools/list":
            return {"tools": [t.wire() for t in self.catalog.tools.values()]}
        if method == "tools/call":
            return await self._call_tool(params, origin)
        if method == "resources/list":
            return {"resources": [r.wire() for r in self.catalog.resources.values()]}
        if method == "resources/templates/list":
            return {"resourceTemplates": [r.wire() for r in self.catalog.templates]}
        if method == "resources/read":
            return await self._read_resource(params, origin)
        if method == "prompts/list":
            return {"prompts": [p.wire() for p in self.catalog.prompts.values()]}
        if method == "prompts/get":
            return await self._get_prompt(params, origin)
        raise RpcError(METHOD_NOT_FOUND, f"Method not found: '{method}'")

    def _initialize(self, params: dict[str, Any]) -> dict[str, Any]:
        asked = params.get("protocolVersion")
        version = asked if asked in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[0]
        out: dict[str, Any] = {
            "protocolVersion": version,
            "capabilities": {"tools": {}, "resources": {}, "prompts": {}},
            "serverInfo": {
                "name": self.settings.server_name,
                "version": self.settings.server_version,
            },
        }
        if self.settings.instructions:
            out["instructions"] = self.settings.instructions
        return out

    @staticmethod
    def _arguments(params: dict[str, Any]) -> dict[str, Any]:
        arguments = params.get("arguments")
        if arguments is None:
            return {}
        if not isinstance(arguments, dict):
            raise RpcError(INVALID_PARAMS, "arguments must be a JSON object")
        return arguments

    @staticmethod
    def _missing(required: list[str] | tuple[str, ...], given: dict[str, Any], what: str) -> None:
        missing = [n for n in required if given.get(n) is None]
        if missing:
            raise RpcError(
                INVALID_PARAMS,
                f"One or more required {what} are missing values. Please provide: "
                + ", ".join(missing),
            )

    def _context(self, origin: Origin, **fields: Any) -> dict[str, Any]:
        return {
            **fields,
            "sessionid": origin.session_id,
            "clientinfo": None,
            "transport": transport(origin.transport, origin.session_id, origin.headers),
        }

    async def _call_tool(self, params: dict[str, Any], origin: Origin) -> dict[str, Any]:
        name = params.get("name")
        tool = self.catalog.tool(name) if isinstance(name, str) else None
        if tool is None:
            raise RpcError(INVALID_PARAMS, f"Unknown tool: '{name}'")
        arguments = self._arguments(params)
        self._missing(tool.required, arguments, "tool properties")
        context = self._context(origin, name=tool.name, arguments=arguments)
        return await telemetry.run_mcp(
            "tools/call", tool.name, tool.info.name, self._run_tool(tool.info.name, context, tool)
        )

    async def _run_tool(self, function: str, context: dict[str, Any], tool: Any) -> dict[str, Any]:
        self.calls += 1
        try:
            value = await self.caller.tool(tool.info, context)
            return results.tool_result(value, tool.use_result_schema)
        except Exception as exc:
            log.exception("MCP tool %s (function %s) failed", tool.name, function)
            text = f"An error occurred invoking '{tool.name}': {_describe(exc)}"
            return {"content": [{"type": "text", "text": text}], "isError": True}

    async def _read_resource(self, params: dict[str, Any], origin: Origin) -> dict[str, Any]:
        uri = params.get("uri")
        resource = self.catalog.resource(uri) if isinstance(uri, str) else None
        if resource is None or not isinstance(uri, str):
            raise RpcError(INVALID_PARAMS, f"Unknown resource: '{uri}'")
        context = self._context(origin, uri=uri)

        async def run() -> dict[str, Any]:
            self.calls += 1
            value = await self._guarded(self.caller.resource(resource.info, context), uri)
            return results.resource_result(value, uri, resource.mime_type)

        return await telemetry.run_mcp("resources/read", uri, resource.info.name, run())

    async def _get_prompt(self, params: dict[str, Any], origin: Origin) -> dict[str, Any]:
        name = params.get("name")
        prompt = self.catalog.prompt(name) if isinstance(name, str) else None
        if prompt is None:
            raise RpcError(INVALID_PARAMS, f"Unknown prompt: '{name}'")
        arguments = self._arguments(params)
        self._missing(prompt.required(), arguments, "prompt arguments")
        context = self._context(origin, name=prompt.name, arguments=arguments)

        async def run() -> dict[str, Any]:
            self.calls += 1
            value = await self._guarded(self.caller.prompt(prompt.info, context), prompt.name)
            try:
                return results.prompt_result(value, prompt.use_result_schema)
            except results.ResultError as exc:
                raise RpcError(INTERNAL_ERROR, f"An error occurred in '{prompt.name}': {exc}")

        return await telemetry.run_mcp("prompts/get", prompt.name, prompt.info.name, run())

    @staticmethod
    async def _guarded(call: Any, what: str) -> Any:
        try:
            return await call
        except Exception as exc:
            log.exception("MCP function for %r failed", what)
            raise RpcError(INTERNAL_ERROR, f"An error occurred in '{what}': {_describe(exc)}")


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
