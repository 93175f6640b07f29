"""Call a user function the way the Python worker does. IO (runs user code).

Parameters are bound by binding name: the trigger's value, a durable client binding
(the JSON the extension would pass, which the SDK's middleware turns into a
``DurableOrchestrationClient``), and a parameter literally named ``context`` that is not
a binding receives a ``func.Context``. Async functions are awaited on the event loop;
sync functions run in a worker thread so they never block it. ``call(..., daemon=True)``
runs a sync function on a daemon thread instead of the shared pool: nothing can stop a
Python thread, so a function that outlives its timeout or the host's stop is left to run,
its result is discarded, and the process can still exit. Those daemon threads are reused
(``_DaemonThreads``): starting an OS thread per activity cost more than a no-op activity.

``invoke`` is ``build_kwargs`` + ``call`` with the bindings of extensions (``bindings``):
their inputs are read before the call and their outputs written only after it succeeded.
``call_bound`` is that second half, for a trigger that builds its own arguments (MCP).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import queue
import threading
import uuid
from collections.abc import Callable
from typing import Any

import azure.functions as func

from durable_host.functions import bindings
from durable_host.functions.loader import FunctionInfo


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
    if "context" not in names and _takes_context(info.fn):
        kwargs["context"] = _Context(info.name, app_dir)
    return kwargs


async def invoke(
    info: FunctionInfo,
    trigger_value: Any,
    client_json: Callable[[], str],
    app_dir: str,
    *,
    metadata: dict[str, Any] | Callable[[], dict[str, Any]] | None = None,
    daemon: bool = False,
) -> Any:
    """Call ``info`` with its trigger value and every binding (see the module docstring);
    ``metadata`` is the trigger's binding data, for the bindings' ``{name}`` expressions (a
    callable is asked only when the function has such bindings: an HTTP body is parsed for
    them, not for every request)."""
    kwargs = build_kwargs(info, trigger_value, client_json, app_dir)
    return await call_bound(info, info.fn, kwargs, metadata=metadata, daemon=daemon)


async def call_bound(
    info: FunctionInfo,
    fn: Callable[..., Any],
    kwargs: dict[str, Any],
    *,
    metadata: dict[str, Any] | Callable[[], dict[str, Any]] | None = None,
    daemon: bool = False,
) -> Any:
    """``call(fn, kwargs)`` with ``info``'s extension bindings: inputs read first (their
    parameters join ``kwargs``, taking precedence over a same-named argument), outputs
    written only once ``fn`` returned. ``fn`` is ``info.fn`` or what a trigger calls in its
    place (the MCP trigger calls the app's own function behind the library's wrapper)."""
    binder = bindings.current()
    if binder is None or not binder.handles(info):
        return await call(fn, kwargs, daemon=daemon)
    data = metadata() if callable(metadata) else metadata
    prepared = await binder.prepare(info, data or {})
    kwargs.update(prepared.kwargs)
    result = await call(fn, kwargs, daemon=daemon)
    return await prepared.succeeded(result)


@functools.cache
def _takes_context(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` has a ``context`` parameter, asked once per function (an app's
    functions are few and fixed), not at every activity run."""
    return "context" in inspect.signature(fn).parameters


async def call(fn: Callable[..., Any], kwargs: dict[str, Any], *, daemon: bool = False) -> Any:
    if inspect.iscoroutinefunction(fn):
        return await fn(**kwargs)
    if daemon:
        result = await _on_daemon_thread(lambda: fn(**kwargs))
    else:
        result = await asyncio.to_thread(lambda: fn(**kwargs))
    if inspect.isawaitable(result):
        return await result
    return result


async def _on_daemon_thread(fn: Callable[[], Any]) -> Any:
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()
    context = contextvars.copy_context()  # the caller's log context (instance id)

    def settle(ok: bool, value: Any) -> None:
        if future.done():
            return  # abandoned (timed out or cancelled): the late outcome is dropped
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)

    def run() -> None:
        try:
            outcome = (True, context.run(fn))
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting coroutine
            outcome = (False, exc)
        with contextlib.suppress(RuntimeError):  # the loop closed: the host stopped meanwhile
            loop.call_soon_threadsafe(settle, *outcome)

    _daemon_threads.submit(run)
    return await future


class _DaemonThreads:
    """Daemon threads that wait up to ``idle`` seconds for another call after one ends.

    A call that never returns keeps its thread, and only that one: the next call takes an
    idle thread or starts a new one, so an abandoned activity never delays another.
    ``_idle`` counts idle threads minus calls queued for them, under ``_lock``.
    """

    def __init__(self, idle: float = 30.0):
        self.idle = idle
        self._lock = threading.Lock()
        self._calls: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._idle = 0

    def submit(self, fn: Callable[[], None]) -> None:
        with self._lock:
            if self._idle > 0:
                self._idle -= 1
                self._calls.put(fn)
                return
        threading.Thread(target=self._serve, args=(fn,), name="activity", daemon=True).start()

    def _serve(self, fn: Callable[[], None]) -> None:
        while True:
            fn()
            with self._lock:
                self._idle += 1
            try:
                fn = self._calls.get(timeout=self.idle)
            except queue.Empty:
                with self._lock:
                    try:
                        # A call queued for this thread while it timed out: serve it.
                        fn = self._calls.get_nowait()
                    except queue.Empty:
                        self._idle -= 1
                        return


_daemon_threads = _DaemonThreads()
