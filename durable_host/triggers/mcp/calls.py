"""Call a tool, resource or prompt function with the trigger value the extension passes. IO.

The trigger value is the extension's invocation context, serialised to JSON as the worker
receives it: a tool gets ``{"name", "arguments", "sessionid", "clientinfo", "transport"}``,
a resource ``{"uri", ...}``, a prompt the same as a tool (which the library's converter turns
into a ``func.PromptInvocationContext``). ``transport`` is ``{"name": "http-streamable" or
"http-sse", "sessionId", "properties": {"headers": {...}}}`` - the request's headers without
``x-functions-key`` (the host's secret stays out of function code; the extension passes it).

A function declared with ``app.mcp_tool()`` is wrapped by the 1.26 library: the wrapper
binds the arguments by parameter name (a parameter annotated ``func.MCPToolContext`` gets the
whole context) and makes a string of the result. The host does that binding itself and calls
the app's own function (the wrapper keeps it as ``__wrapped__``), so ``results`` sees the real
return value. Other bindings of the function (a ``durableClient``) are passed as the worker
passes them (``functions.invocation``).
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Callable, Mapping
from typing import Any

import azure.functions as func

from durable_host.functions import invocation
from durable_host.functions.loader import FunctionInfo

_SECRET_HEADERS = ("x-functions-key",)


def transport(name: str, session_id: str | None, headers: Mapping[str, str]) -> dict[str, Any]:
    kept = {k: v for k, v in headers.items() if k.lower() not in _SECRET_HEADERS}
    return {"name": name, "sessionId": session_id, "properties": {"headers": kept}}


@functools.cache
def _parameters(target: Callable[..., Any]) -> tuple[tuple[str, bool], ...]:
    """The app function's parameters, each with whether it takes the whole context; asked
    once per function, not at every call."""
    return tuple(
        (name, p.annotation is func.MCPToolContext or p.annotation == "func.MCPToolContext")
        for name, p in inspect.signature(target).parameters.items()
    )


@functools.cache
def library_wrapped(fn: Callable[..., Any]) -> Callable[..., Any] | None:
    """The app's own function behind the 1.26 ``mcp_tool`` wrapper, or None."""
    target = getattr(fn, "__wrapped__", None)
    code = getattr(fn, "__code__", None)
    if target is None or code is None:
        return None
    where = getattr(code, "co_qualname", "")
    if "mcp_tool" in where and "azure" in code.co_filename and "functions" in code.co_filename:
        return target
    return None


class Caller:
    """Calls the app's MCP functions; ``client_json`` is the durable client binding value."""

    def __init__(self, client_json: Callable[[], str], app_dir: str) -> None:
        self.client_json = client_json
        self.app_dir = app_dir

    def _kwargs(self, info: FunctionInfo, trigger_value: Any) -> dict[str, Any]:
        return invocation.build_kwargs(info, trigger_value, self.client_json, self.app_dir)

    async def tool(self, info: FunctionInfo, context: dict[str, Any]) -> Any:
        text = json.dumps(context)
        kwargs = self._kwargs(info, text)
        target = library_wrapped(info.fn)
        if target is None:
            return await invocation.call(info.fn, kwargs)
        trigger = str(info.trigger().get("name") or "context")
        kwargs.pop(trigger, None)
        arguments = context.get("arguments") or {}
        for name, whole in _parameters(target):
            if whole:
                kwargs[name] = context
            elif name in arguments and name not in kwargs:
                kwargs[name] = arguments[name]
        return await invocation.call(target, kwargs)

    async def resource(self, info: FunctionInfo, context: dict[str, Any]) -> Any:
        return await invocation.call(info.fn, self._kwargs(info, json.dumps(context)))

    async def prompt(self, info: FunctionInfo, context: dict[str, Any]) -> Any:
        value = func.PromptInvocationContext(json.dumps(context))
        return await invocation.call(info.fn, self._kwargs(info, value))
