"""The Storage extension on one host: checked at start-up, then bindings, listeners and watchers. IO.

``StorageExtension.plan(index, env, app_dir, hub)`` is the start-up check (``spec``,
``options``): it raises ``StorageConfigError`` before anything is opened. Then, in the host's
order:

1. ``await open()`` - the accounts' clients (and the host's Azurite for
   ``UseDevelopmentStorage=true``), and the binder installed (``functions.bindings``): from
   here on every trigger's invocations read and write storage bindings;
2. ``start(client_json)`` - once the engine runs: one ``QueueListener`` per queue-triggered
   function and one ``BlobWatcher`` per blob-triggered one (``maxDegreeOfParallelism`` bounds
   all blob invocations together); each invocation runs in its telemetry span;
3. ``await stop(grace)`` - no new message or blob is taken; invocations in flight get
   ``grace`` seconds (a message still running reappears after its lease, as after a crash);
   ``await close()`` then closes the clients, once the host has asked its last ``backlog``.

``running`` counts invocations in flight (the idle watch reads it); ``backlog()`` reports each
queue trigger's queue length and oldest message age and each blob trigger's unhandled blobs
at its last scan, for ``GET /admin/host/scale`` and the dashboard.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from durable_host.functions import bindings, invocation
from durable_host.functions.loader import AppIndex, FunctionInfo
from durable_host.ops import telemetry
from durable_host.triggers.storage import options as options_mod
from durable_host.triggers.storage import spec
from durable_host.triggers.storage.accounts import Accounts
from durable_host.triggers.storage.binder import StorageBinder
from durable_host.triggers.storage.blob_trigger import BlobWatcher, host_id
from durable_host.triggers.storage.queue_trigger import QueueListener

log = logging.getLogger("durable_host.storage")


def _served(index: AppIndex) -> list[FunctionInfo]:
    """The functions whose storage bindings run: every trigger's that calls through the hook
    (``functions.bindings``), MCP tools, resources and prompts included."""
    return [
        *index.http,
        *index.activities.values(),
        *index.timers,
        *index.storage,
        *index.mcp,
    ]


class StorageExtension:
    def __init__(
        self,
        index: AppIndex,
        plan: dict[str, list[spec.Binding]],
        queue_options: options_mod.QueueOptions,
        blob_options: options_mod.BlobOptions,
        app_dir: Path,
        host: str,
    ) -> None:
        self.index, self.plan = index, plan
        self.queue_options, self.blob_options = queue_options, blob_options
        self.accounts = Accounts(app_dir / ".durable" / "azurite")
        self.app_dir, self.host = app_dir, host
        self.listeners: list[QueueListener] = []
        self.watchers: list[BlobWatcher] = []
        self.running = 0
        self._tasks: list[asyncio.Task[None]] = []
        self._client_json: Callable[[], str] = lambda: "{}"

    @classmethod
    def plan_for(
        cls, index: AppIndex, env: Mapping[str, str], app_dir: Path, hub: str
    ) -> StorageExtension:
        plan = spec.plan(_served(index), env, index)
        host_json = _host_json(app_dir)
        queue_options, blob_options = options_mod.read(host_json, env)
        return cls(index, plan, queue_options, blob_options, app_dir, host_id(env, hub))

    @property
    def active(self) -> bool:
        return bool(self.plan)

    async def open(self) -> None:
        if not self.plan:
            return
        needs: dict[str, tuple[Any, set[str]]] = {}
        for found in self.plan.values():
            for b in found:
                services = needs.setdefault(b.connection.name, (b.connection, set()))[1]
                services.add({"queueTrigger": "queue", "blobTrigger": "blob"}.get(b.type, b.type))
                if b.type == "blobTrigger":
                    services.add("queue")  # the poison queue
        await self.accounts.open(needs)
        bindings.install(
            StorageBinder(
                self.plan, self.accounts, self.queue_options.message_encoding, self._notify
            )
        )

    def start(self, client_json: Callable[[], str]) -> None:
        self._client_json = client_json
        self.build()
        runners: list[QueueListener | BlobWatcher] = [*self.listeners, *self.watchers]
        for runner in runners:
            self._tasks.append(asyncio.create_task(runner.run()))
        for listener in self.listeners:
            log.info(
                "queue function %s: listening on queue %s", listener.info.name, listener.queue_name
            )
        for watcher in self.watchers:
            log.info(
                "blob function %s: scanning %s every %.1fs",
                watcher.info.name,
                watcher.binding.path,
                self.blob_options.scan_seconds,
            )

    async def survey(self) -> None:
        """Count the blobs each blob trigger has not handled yet, without running anything
        (``next-wake`` of a stopped host)."""
        self.build()
        for watcher in self.watchers:
            await watcher.scan(dry=True)

    def build(self) -> None:
        """The listeners and watchers of the enabled queue and blob functions (not started)."""
        if self.listeners or self.watchers:
            return
        slots = asyncio.Semaphore(self.blob_options.max_degree_of_parallelism)
        for info in self.index.storage:
            if info.disabled:
                continue
            trigger = next(b for b in self.plan[info.name] if b.type.endswith("Trigger"))
            connection = trigger.connection.name
            if trigger.type == "queueTrigger":
                listener = QueueListener(
                    info,
                    trigger,
                    self.accounts.queues(connection),
                    self.queue_options,
                    self._invoke_queue,
                )
                self.listeners.append(listener)
            else:
                watcher = BlobWatcher(
                    info,
                    trigger,
                    self.accounts.blobs(connection),
                    self.accounts.queues(connection),
                    self.host,
                    self.blob_options,
                    self.queue_options.message_encoding,
                    self._invoke_blob,
                    slots,
                )
                self.watchers.append(watcher)

    def _notify(self, kind: str, connection: str, where: str) -> None:
        """A message or blob this host just wrote: wake the listener or watcher of it."""
        if kind == "queue":
            for listener in self.listeners:
                if listener.binding.connection.name == connection and listener.queue_name == where:
                    listener.notify()
            return
        for watcher in self.watchers:
            if watcher.binding.connection.name == connection and watcher.binding.container == where:
                watcher.notify()

    async def _invoke(
        self, kind: str, info: FunctionInfo, value: Any, metadata: dict[str, Any]
    ) -> Any:
        self.running += 1
        try:
            return await telemetry.run_trigger(
                info.name,
                kind,
                {"messaging.message.id": str(metadata.get("Id"))} if kind == "queue" else {},
                invocation.invoke(
                    info, value, self._client_json, str(self.app_dir), metadata=metadata
                ),
            )
        finally:
            self.running -= 1

    async def _invoke_queue(self, info: FunctionInfo, value: Any, metadata: dict[str, Any]) -> Any:
        return await self._invoke("queue", info, value, metadata)

    async def _invoke_blob(self, info: FunctionInfo, value: Any, metadata: dict[str, Any]) -> Any:
        return await self._invoke("blob", info, value, metadata)

    async def stop(self, grace: float) -> None:
        for listener in self.listeners:
            listener.stop()
        for watcher in self.watchers:
            watcher.stop()
        if self._tasks:
            _, late = await asyncio.wait(self._tasks, timeout=grace)
            for task in late:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def close(self) -> None:
        """After ``stop`` and the last ``backlog`` (the idle exit's wake time asks it)."""
        if bindings.current() is not None:
            bindings.install(None)
        await self.accounts.close()

    def stats(self) -> dict[str, Any]:
        return {
            "queues": {x.info.name: dict(x.stats) for x in self.listeners},
            "blobs": {x.info.name: dict(x.stats) for x in self.watchers},
        }

    async def backlog(self, now: datetime | None = None) -> dict[str, Any]:
        moment = now or datetime.now(UTC)
        queues: list[dict[str, Any]] = []
        for listener in self.listeners:
            try:
                found = await listener.backlog()
            except Exception as exc:  # noqa: BLE001 - one queue's outage is reported, not raised
                queues.append(
                    {
                        "function": listener.info.name,
                        "queue": listener.queue_name,
                        "error": str(exc)[:200],
                    }
                )
                continue
            oldest = found["oldest"]
            queues.append(
                {
                    "function": listener.info.name,
                    "queue": listener.queue_name,
                    "length": found["length"],
                    "oldestAgeSeconds": (
                        None
                        if oldest is None
                        else round(max(0.0, (moment - oldest).total_seconds()), 3)
                    ),
                }
            )
        blobs = [
            {
                "function": w.info.name,
                "path": w.binding.path,
                "pending": w.pending,
                "scans": w.stats["scans"],
                "remembered": len(w.done),  # handled versions this process keeps in memory
            }
            for w in self.watchers
        ]
        per_host = self.queue_options.batch_size + self.queue_options.new_batch_threshold
        wanted = max(
            [math.ceil(int(q.get("length") or 0) / max(1, per_host)) for q in queues]
            + [1 if w["pending"] else 0 for w in blobs]
            + [0]
        )
        return {"queues": queues, "blobs": blobs, "recommendedHosts": wanted}


def _host_json(app_dir: Path) -> dict[str, Any]:
    path = app_dir / "host.json"
    if not path.is_file():
        return {}
    try:
        found = json.loads(path.read_text(encoding="utf-8-sig"))
    except ValueError:
        return {}  # the host's own config reader reports a broken host.json
    return found if isinstance(found, dict) else {}
