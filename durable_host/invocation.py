"""Call a user function the way the Python worker does. IO (runs user code).

Parameters are bound by binding name: the trigger's value, a durable client binding
(the JSON the extension would pass, which the SDK's middleware turns into a
``DurableOrchestrationClient``), and a parameter literally named ``context`` that is not
a binding receives a ``func.Context``. Async functions are awaited on the event loop;
sync functions run in a worker thread so they never block it.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import uuid
from collections.abc import Callable
from typing import Any

import azure.functions as func

from durable_host.loader import FunctionInfo


class _Context(func.Context):
    def __init__(self, function_name: str, directory: str):
        self._invocation_id = str(uuid.uuid4())
        self._function_name = function_name
        self._directory = directory
        self._local = threading.local()

    @property
    def invocation_id(self) -> str:
        return self._invocation_id

    @property
    def thread_local_storage(self) -> Any:
        return self._local

    @property
    def function_name(self) -> str:
        return self._function_name

    @property
    def function_directory(self) -> str:
        return self._directory

    @property
    def trace_context(self) -> Any:
        return None

    @property
    def retry_context(self) -> Any:
        return None


def build_kwargs(
    info: FunctionInfo,
    trigger_value: Any,
    client_json: Callable[[], str],
    app_dir: str,
) -> dict[str, Any]:
    kwargs: dict[str, Any] = {}
    names = set()
    for binding in info.bindings:
        if binding.get("direction") != "IN" or "name" not in binding:
            continue
        names.add(binding["name"])
        kind = binding.get("type", "")
        if kind.endswith("Trigger"):
            kwargs[binding["name"]] = trigger_value
        elif kind == "durableClient":
            kwargs[binding["name"]] = client_json()
    parameters = inspect.signature(info.fn).parameters
    if "context" in parameters and "context" not in names:
        kwargs["context"] = _Context(info.name, app_dir)
    return kwargs


async def call(fn: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
    if inspect.iscoroutinefunction(fn):
        return await fn(**kwargs)
    result = await asyncio.to_thread(lambda: fn(**kwargs))
    if inspect.isawaitable(result):
        return await result
    return result
