"""One factory for every store: ``open_store(spec, cfg)`` builds the store a ``--store``
spec names. IO only when the store is opened (the constructors connect nothing).

Specs: ``sqlite`` (default: ``<app>/.durable/<hub>.db``), ``sqlite:PATH``, ``azure`` (the
``AzureWebJobsStorage`` connection, as Functions reads it), ``postgres`` (the connection from
``DURABLE_HOST_POSTGRES``) or ``postgres:<conninfo>``. The hub is host.json's unless
``DURABLE_HOST_HUB`` overrides it (tests use one hub per test). A missing or malformed setting
is a ``StoreSpecError`` naming it (never quoting a secret); the Azure and PostgreSQL SDKs are
imported only when their store is chosen.
"""

from __future__ import annotations

import logging
import os
import re
import signal
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from durable_host.cluster import membership
from durable_host.cluster.ownership import DEFAULT_PARTITIONS
from durable_host.functions import config as config_mod
from durable_host.ops import settings
from durable_host.store.base import Store
from durable_host.store.sqlite.store import SqliteStore

if TYPE_CHECKING:
    from durable_host.core.versioning import VersionPolicy
    from durable_host.store.postgres import PostgresStore

log = logging.getLogger("durable_host")


class StoreSpecError(Exception):
    pass


def open_store(
    spec: str | None,
    cfg: config_mod.HostConfig,
    on_lost: Callable[[str], None] | None = None,
    read_only: bool = False,
) -> Store:
    """``on_lost(reason)``: the store can no longer be used by this host (it must stop).
    ``read_only``: for tools beside a running host (no lock or lease; secrets only)."""
    lost = on_lost or step_back
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
                policy=cfg.versioning,
            )
        except ValueError as exc:  # the setting is missing or malformed (never quoted whole)
            raise StoreSpecError(str(exc)) from None
    raise StoreSpecError(
        f"unknown store {spec!r}: use sqlite, sqlite:PATH, azure, postgres or postgres:URL"
    )


def _azure_store(
    cfg: config_mod.HostConfig, on_lost: Callable[[str], None], read_only: bool = False
) -> Store:
    """Azure Storage from the connection host.json names (``AzureWebJobsStorage`` by default,
    as the extension reads it); the hub name from host.json unless ``DURABLE_HOST_HUB``
    overrides it (tests use one hub per test)."""
    from durable_host.store.azure import AzureStore  # the SQLite store needs no Azure SDK
    from functions_connections import ConnectionSettingError, read_connection

    name = cfg.storage_connection  # host.json storageProvider.connectionName, as the extension
    try:
        setting = read_connection(name, os.environ)
    except ConnectionSettingError as exc:
        named = (
            "" if name == config_mod.STORAGE_CONNECTION else ", named by host.json's connectionName"
        )
        raise StoreSpecError(
            f"--store azure needs the {name} setting (in the environment or"
            f" local.settings.json{named}): {exc}"
        ) from exc
    connection = setting.connection_string or setting
    hub = os.environ.get("DURABLE_HOST_HUB") or cfg.hub_name
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9]{2,49}", hub):
        raise StoreSpecError(
            f"hub name {hub!r} must be 3-50 letters or digits, starting with a letter"
        )
    try:
        lease = settings.seconds(os.environ, membership.LEASE_SETTING, 15, 15, 60)
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


def step_back(reason: str) -> None:
    """A host that lost the task hub stops (SIGTERM runs the normal graceful shutdown)."""
    log.critical("durable host: %s; stopping this host", reason)
    os.kill(os.getpid(), signal.SIGTERM)


def postgres_store(
    spec: str,
    hub_name: str,
    on_lost: Callable[[str], None],
    read_only: bool = False,
    *,
    partition_count: int | None = None,
    version: str = "",
    policy: VersionPolicy | None = None,
) -> PostgresStore:
    """``postgres`` (the connection from ``DURABLE_HOST_POSTGRES``) or ``postgres:<conninfo>``;
    the hub from host.json unless ``DURABLE_HOST_HUB`` overrides it; ``partition_count``
    from host.json as on Azure (default ``ownership.DEFAULT_PARTITIONS``); ``version`` and
    ``policy`` (host.json's ``defaultVersion`` and version policy) as on Azure too. Raises
    ``PostgresSettingsError`` (a ``ValueError``) for a missing or malformed setting."""
    from durable_host.store.postgres import PostgresStore, from_spec

    hub = os.environ.get("DURABLE_HOST_HUB") or hub_name
    return PostgresStore(
        from_spec(spec, hub),
        on_lost=on_lost,
        read_only=read_only,
        partition_count=partition_count or DEFAULT_PARTITIONS,
        version=version,
        policy=policy,
    )
