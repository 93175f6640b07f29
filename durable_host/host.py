"""The host as one object: settings, app index, store, engine and HTTP server.

``Host.start()`` reads ``host.json`` and ``local.settings.json`` (never overriding the
environment), imports the app once, opens the store (default: SQLite at
``<app>/.durable/<hub>.db``), starts serving HTTP and only then starts the engine, so
``/admin/host/status`` answers ``Running`` once work and requests are both served.
``STARTUP_ERRORS`` are the failures of ``start`` that mean "this host cannot run as
configured" (the command line reports them in one line instead of a traceback).

Auth (``http/auth.py``, ``keys.py``): ``auth`` None means keys whenever the host binds
beyond loopback and off on loopback; the start-up log says which and why. Links name
``public_url`` (``--public-url`` / ``DURABLE_HOST_PUBLIC_URL``) or the bound address;
``rpcBaseUrl`` names the bound address on loopback when the host binds every interface.

A store that is lost while the host runs (another host took it over, its file was
removed, replaced or found corrupt) calls back ``Host.lose``: from then on
``/admin/host/status`` no longer says ``Running``, the host stops gracefully, and
``fatal`` holds the reason, which the command line prints before it exits with 2.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import signal
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from durable_host import server
from durable_host.cluster import membership
from durable_host.core import history as h
from durable_host.dashboard import Dashboard
from durable_host.engine.client import DurableClient
from durable_host.engine.loops import Engine
from durable_host.functions import config as config_mod
from durable_host.functions import loader, startup_report
from durable_host.http import auth, cors, listener
from durable_host.http.key_routes import KeyRoutes
from durable_host.http.keys import KeyConfigError, Keys
from durable_host.http.limits import Limits
from durable_host.ops import telemetry
from durable_host.store import postgres_store
from durable_host.store.base import Store, StoreError
from durable_host.store.sqlite.store import SqliteStore
from durable_host.triggers import timer as timer_triggers
from durable_host.triggers import wake

log = logging.getLogger("durable_host")


class StoreSpecError(Exception):
    pass


STARTUP_ERRORS: tuple[type[Exception], ...] = (
    loader.AppLoadError,
    config_mod.ConfigError,
    StoreError,
    StoreSpecError,
    KeyConfigError,
    startup_report.SelectionError,
    OSError,
)


def open_store(
    spec: str | None,
    cfg: config_mod.HostConfig,
    on_lost: Callable[[str], None] | None = None,
    read_only: bool = False,
) -> Store:
    """``on_lost(reason)``: the store can no longer be used by this host (it must stop).
    ``read_only``: for tools beside a running host (no lock or lease; secrets only)."""
    lost = on_lost or _step_back
    if spec is None or spec == "sqlite":
        path = cfg.app_dir / ".durable" / f"{cfg.hub_name}.db"
        return SqliteStore(path, read_only, on_lost=lost)
    if spec.startswith("sqlite:"):
        return SqliteStore(Path(spec.removeprefix("sqlite:")), read_only, on_lost=lost)
    if spec == "azure":
        return _azure_store(cfg, lost, read_only)
    if spec == "postgres" or spec.startswith("postgres:"):
        try:
            return postgres_store(
                spec,
                cfg.hub_name,
                lost,
                read_only,
                partition_count=cfg.partition_count,
                version=cfg.default_version or "",
            )
        except ValueError as exc:  # the setting is missing or malformed (never quoted whole)
            raise StoreSpecError(str(exc)) from None
    raise StoreSpecError(
        f"unknown store {spec!r}: use sqlite, sqlite:PATH, azure, postgres or postgres:URL"
    )


def _azure_store(
    cfg: config_mod.HostConfig, on_lost: Callable[[str], None], read_only: bool = False
) -> Store:
    """Azure Storage from ``AzureWebJobsStorage`` (as Functions reads it); the hub name from
    host.json unless ``DURABLE_HOST_HUB`` overrides it (tests use one hub per test)."""
    from durable_host.store.azure import AzureStore  # the SQLite store needs no Azure SDK
    from functions_connections import ConnectionSettingError, read_connection

    try:
        setting = read_connection("AzureWebJobsStorage", os.environ)
    except ConnectionSettingError as exc:
        raise StoreSpecError(
            f"--store azure needs the AzureWebJobsStorage setting (in the environment or"
            f" local.settings.json): {exc}"
        ) from exc
    connection = setting.connection_string or setting
    hub = os.environ.get("DURABLE_HOST_HUB") or cfg.hub_name
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9]{2,49}", hub):
        raise StoreSpecError(
            f"hub name {hub!r} must be 3-50 letters or digits, starting with a letter"
        )
    try:
        lease = membership.seconds_setting(os.environ, membership.LEASE_SETTING, 15, 15, 60)
        silence = membership.silence_setting(os.environ, lease)
    except ValueError as exc:
        raise StoreSpecError(str(exc)) from None
    return AzureStore(
        connection,
        hub,
        azurite_location=cfg.app_dir / ".durable" / "azurite",
        on_lost=on_lost,
        read_only=read_only,
        partition_count=cfg.partition_count,
        version=cfg.default_version or "",
        policy=cfg.versioning,
        lease_seconds=int(lease),
        silence_seconds=silence,
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
    auth: str | None = None  # "keys" | "off" | None (decided by the bound address)
    public_url: str | None = None
    fatal: str | None = None  # why the host stopped by itself (its store was lost)
    # Core Tools' habits (cli.py): --functions, --cors / local.settings.json Host.CORS
    functions: list[str] | None = None
    cors: tuple[str, ...] = ()
    cors_credentials: bool = False
    # Scale to zero (wake.py): stop after this many idle seconds; ``wake`` says when to return.
    exit_when_idle: float | None = None
    wake: dict[str, Any] | None = None

    def lose(self, reason: str) -> None:
        """The store is lost: stop serving and stop the host (once)."""
        if self.fatal is None:
            self.fatal = reason
            self._running = False
            if self._started:  # before that, the error reaches ``start``'s caller itself
                _step_back(reason)

    async def start(self) -> None:
        self.app_dir = Path(self.app_dir).resolve()
        config_mod.apply_local_settings(self.app_dir)
        config_mod.set_script_root(self.app_dir)
        self.config = config_mod.load(self.app_dir)
        telemetry_line = telemetry.configure(os.environ)  # OTEL_* settings; off when unset
        try:
            self.public_url = auth.parse_public_url(
                self.public_url or os.environ.get("DURABLE_HOST_PUBLIC_URL")
            )
        except ValueError as exc:
            raise config_mod.ConfigError(str(exc)) from exc
        auth_on, auth_reason = auth.decide(self.auth, self.host)
        limits = Limits.from_env()
        index = startup_report.select(loader.load_app(self.app_dir), self.functions)
        self.timer_specs = timer_triggers.plan(index, os.environ, datetime.now(UTC))
        self.idle = asyncio.Event()
        self.timers: timer_triggers.TimerTriggers | None = None
        self.idle_watch: wake.IdleWatch | None = None
        self._running = self._started = False
        self.store = open_store(self.store_spec, self.config, self.lose)
        # Before the store opens: a bad engine setting stops the start with nothing touched.
        self.engine = Engine(index, self.store, self.config)
        serve_versions = getattr(self.store, "serve_versions", None)
        if serve_versions is not None:  # a store several hosts of any version share (Azure)
            serve_versions(self.engine.parking, set(index.activities))
        log.info("%s", telemetry_line)  # after the checks whose failure is one line alone
        await self.store.open()
        keys = Keys(self.store, os.environ) if auth_on else None
        if keys is not None:
            await keys.load()
        self.gate = auth.Gate(keys, auth_on)
        self.client = DurableClient(self.engine)
        app = server.build_app(
            self.client,
            hub=self.config.hub_name,
            route_prefix=self.config.route_prefix,
            app_dir=str(self.app_dir),
            public_base=lambda: self.link_base,
            is_running=lambda: self._running and self.fatal is None,
            local_base=lambda: self.local_base,
            gate=self.gate,
            key_routes=KeyRoutes(keys, [f.name for f in index.http]) if keys else None,
            limits=limits,
            dashboard=Dashboard(self.client, self.config.hub_name),
        )
        if self.cors:
            app.middlewares.insert(0, cors.middleware(self.cors, self.cors_credentials))
        self._set_bases()  # a request can arrive before the bound port is known
        self._runner, self.port = await listener.serve(app, self.host, self.port, limits)
        self._set_bases()
        self.engine.client_json = lambda: server.client_binding_json(
            self.link_base,
            self.local_base,
            self.config.hub_name,
            self.gate.link_code(),
            self.gate.rpc_segment,
        )
        await self.engine.start()
        self._start_schedules()
        self._started = True  # from here on a lost store stops the host by a signal
        self._running = self.fatal is None
        log.info(
            "durable host serving %s on %s (hub %s)",
            self.app_dir,
            self.base_url,
            self.config.hub_name,
        )
        for line in startup_report.function_lines(index, self.base_url, self.config.route_prefix):
            (log.warning if line.startswith("not run:") else log.info)("%s", line)
        log.log(
            logging.INFO if auth_on or auth.is_loopback(self.host) else logging.WARNING,
            "%s",
            auth_reason,
        )
        if self.public_url is None and auth.is_wildcard(self.host):
            log.warning(
                "check-status links name %s; set --public-url (or DURABLE_HOST_PUBLIC_URL)"
                " to the address clients reach this host at",
                self.base_url,
            )

    def _start_schedules(self) -> None:
        """Timer triggers and the idle watch, once the engine serves the work they start."""
        self.timers = timer_triggers.TimerTriggers(
            self.timer_specs, self.store, lambda: self.engine.client_json(), str(self.app_dir)
        )
        self.timers.start()
        if self.exit_when_idle is not None:
            timers = self.timers
            self.idle_watch = wake.IdleWatch(
                self.exit_when_idle, lambda: self.engine.busy() or timers.running > 0, self.idle.set
            )
            self.idle_watch.start()

    def _set_bases(self) -> None:
        self.base_url = f"http://{auth.authority(self.host)}:{self.port}"
        self.local_base = f"http://{auth.authority(auth.local_address(self.host))}:{self.port}"
        self.link_base = self.public_url or self.base_url

    async def stop(self) -> None:
        self._running = False
        if self.idle_watch is not None:
            self.idle_watch.stop()
        if self.timers is not None:
            await self.timers.stop()
        await self.engine.stop(self.grace)
        await self._runner.cleanup()
        if self.exit_when_idle is not None and self.fatal is None:
            # Asked only now that nothing can add work: the answer is the store's last word.
            try:
                self.wake = await wake.describe(self.store, self.timer_specs)
            except StoreError as exc:  # unsure: a waker that comes back at once loses nothing
                log.warning("could not read the next wake time (%s); announcing now", exc)
                self.wake = {"next_wake": h.format_time(datetime.now(UTC)), "error": str(exc)}
        await self.store.close()
        telemetry.shutdown()  # flush what the exporters still hold
