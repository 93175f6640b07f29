"""The host as one object: settings, app index, store, engine and HTTP server.

``Host.start()`` reads ``host.json`` and ``local.settings.json`` (never overriding the
environment), imports the app once, opens the store (default: SQLite at
``<app>/.durable/<hub>.db``), starts serving HTTP and only then starts the engine, so
``/admin/host/status`` answers ``Running`` once work and requests are both served.
``STARTUP_ERRORS`` are the failures of ``start`` that mean "this host cannot run as
configured" (the command line reports them in one line instead of a traceback).
"""

from __future__ import annotations

import logging
import os
import re
import signal
from dataclasses import dataclass
from pathlib import Path


from durable_host import config as config_mod
from durable_host import loader
from durable_host.client import DurableClient
from durable_host.engine import Engine
from durable_host.http import listener, server
from durable_host.http.limits import Limits
from durable_host.store.base import Store, StoreLockedError
from durable_host.store.sqlite import SqliteStore

log = logging.getLogger("durable_host")


class StoreSpecError(Exception):
    pass


STARTUP_ERRORS: tuple[type[Exception], ...] = (
    loader.AppLoadError,
    config_mod.ConfigError,
    StoreLockedError,
    StoreSpecError,
    OSError,
)


def open_store(spec: str | None, cfg: config_mod.HostConfig) -> Store:
    if spec is None or spec == "sqlite":
        return SqliteStore(cfg.app_dir / ".durable" / f"{cfg.hub_name}.db")
    if spec.startswith("sqlite:"):
        return SqliteStore(Path(spec.removeprefix("sqlite:")))
    if spec == "azure":
        return _azure_store(cfg)
    raise StoreSpecError(f"unknown store {spec!r}: use sqlite, sqlite:PATH or azure")


def _azure_store(cfg: config_mod.HostConfig) -> Store:
    """Azure Storage from ``AzureWebJobsStorage`` (as Functions reads it); the hub name from
    host.json unless ``DURABLE_HOST_HUB`` overrides it (tests use one hub per test)."""
    from durable_host.store.azure import AzureStore  # the SQLite store needs no Azure SDK

    connection = os.environ.get("AzureWebJobsStorage", "").strip()
    if not connection:
        raise StoreSpecError(
            "--store azure needs the AzureWebJobsStorage setting (a connection string, or"
            " UseDevelopmentStorage=true for Azurite) in the environment or local.settings.json"
        )
    hub = os.environ.get("DURABLE_HOST_HUB") or cfg.hub_name
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9]{2,49}", hub):
        raise StoreSpecError(
            f"hub name {hub!r} must be 3-50 letters or digits, starting with a letter"
        )
    return AzureStore(
        connection, hub, azurite_location=cfg.app_dir / ".durable" / "azurite", on_lost=_step_back
    )


def _step_back(reason: str) -> None:
    """A host that lost the task hub stops (SIGTERM runs the normal graceful shutdown)."""
    log.critical("durable host: %s; stopping this host", reason)
    os.kill(os.getpid(), signal.SIGTERM)


@dataclass
class Host:
    app_dir: Path
    host: str = "127.0.0.1"
    port: int = 7071
    store_spec: str | None = None
    grace: float = 10.0

    async def start(self) -> None:
        self.app_dir = Path(self.app_dir).resolve()
        config_mod.apply_local_settings(self.app_dir)
        config_mod.set_script_root(self.app_dir)
        self.config = config_mod.load(self.app_dir)
        limits = Limits.from_env()
        index = loader.load_app(self.app_dir)
        self.store = open_store(self.store_spec, self.config)
        await self.store.open()
        self.engine = Engine(index, self.store, self.config)
        self.client = DurableClient(self.engine)
        self._running = False
        app = server.build_app(
            self.client,
            hub=self.config.hub_name,
            route_prefix=self.config.route_prefix,
            app_dir=str(self.app_dir),
            public_base=lambda: self.base_url,
            is_running=lambda: self._running,
            limits=limits,
        )
        self._runner, self.port = await listener.serve(app, self.host, self.port, limits)
        self.base_url = f"http://{self.host}:{self.port}"
        self.engine.client_json = lambda: server.client_binding_json(
            self.base_url, self.base_url, self.config.hub_name
        )
        await self.engine.start()
        self._running = True
        log.info("durable host serving %s on %s (hub %s)", self.app_dir, self.base_url, self.config.hub_name)

    async def stop(self) -> None:
        self._running = False
        await self.engine.stop(self.grace)
        await self._runner.cleanup()
        await self.store.close()
