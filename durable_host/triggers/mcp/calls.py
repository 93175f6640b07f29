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
passes them (``functions.invocation``), and the Storage extension's blob, queue and table
bindings go through the one hook every trigger uses (``invocation.call_bound``): inputs read
before the call, outputs written only after it returned, an error in either failing that call.

The binding data a tool call gives those bindings' ``{...}`` expressions is the extension's
(``McpToolTriggerBinding``): the trigger parameter's name (the context JSON),
``mcptoolcontext`` (the context), ``mcptoolargs`` (each argument as text, as .NET's
``JsonElement.ToString`` gives it: ``argument_text``) and
``mcpsessionid``; so ``snippets/{mcptoolargs.snippetname}.json`` names a blob by an argument.
Resources and prompts get the trigger parameter's name only (the extension documents no more).
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
        trigger = _trigger_name(info)
        arguments = context.get("arguments") or {}
        data = {
            trigger: text,
            "mcptoolcontext": context,
            "mcptoolargs": {str(k): argument_text(v) for k, v in arguments.items()},
            "mcpsessionid": context.get("sessionid"),
        }
        target = library_wrapped(info.fn)
        if target is None:
            return await invocation.call_bound(info, info.fn, kwargs, metadata=data)
        kwargs.pop(trigger, None)
        for name, whole in _parameters(target):
            if whole:
                kwargs[name] = context
            elif name in arguments and name not in kwargs:
                kwargs[name] = arguments[name]
        return await invocation.call_bound(info, target, kwargs, metadata=data)

    async def resource(self, info: FunctionInfo, context: dict[str, Any]) -> Any:
        text = json.dumps(context)
        kwargs = self._kwargs(info, text)
        return await invocation.call_bound(
            info, info.fn, kwargs, metadata={_trigger_name(info): text}
        )

    async def prompt(self, info: FunctionInfo, context: dict[str, Any]) -> Any:
        text = json.dumps(context)
        kwargs = self._kwargs(info, func.PromptInvocationContext(text))
        return await invocation.call_bound(
            info, info.fn, kwargs, metadata={_trigger_name(info): text}
        )


def _trigger_name(info: FunctionInfo) -> str:
    return str(info.trigger().get("name") or "context")


def argument_text(value: Any) -> str:
    """An argument as ``{mcptoolargs.<name>}`` gives it (``JsonElement.ToString``): a string
    as it is, ``True``/``False``, an empty text for null, a number or an object or array as
    its (compact) JSON text - ``5``, ``{"a":1}``."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "True" if value else "False"
    if value is None:
        return ""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
