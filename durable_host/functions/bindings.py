"""Bindings beyond the trigger: how an extension binds a function's other parameters.

The contract between invoking a function (``invocation.invoke``) and the extensions that own
input and output bindings (the Storage extension, ``triggers/storage``):

* ``Binder.handles(info)`` says whether the function has bindings of that extension;
* ``Binder.prepare(info, metadata)`` reads every input binding (``metadata`` is the trigger's
  binding data, the source of ``{name}`` expressions) and makes the output parameters
  (``func.Out``); it returns a ``Prepared`` whose ``kwargs`` join the call's arguments. A
  failure here fails the invocation before the function runs.
* ``Prepared.succeeded(result)`` runs only when the function returned without raising: it
  writes the outputs (an output binding named ``$return`` takes ``result``) and returns the
  result the trigger sees. A failed function writes nothing, as on the Functions host.

One binder per process (``install``), as one Functions host serves one app: the host installs
it at start-up, before any trigger can run a function, and every trigger (HTTP, timers,
activities, queue and blob triggers, MCP tools, resources and prompts) finds it through
``current()``. This package may not
import the extensions (they are a higher layer), hence the hook.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from durable_host.functions.loader import FunctionInfo


class Prepared(Protocol):
    kwargs: dict[str, Any]

    async def succeeded(self, result: Any) -> Any: ...


class Binder(Protocol):
    def handles(self, info: FunctionInfo) -> bool: ...

    async def prepare(self, info: FunctionInfo, metadata: Mapping[str, Any]) -> Prepared: ...


_binder: Binder | None = None


def install(binder: Binder | None) -> None:
    global _binder
    _binder = binder


def current() -> Binder | None:
    return _binder
