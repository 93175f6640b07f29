"""Storage port of the durable host and its implementations.

``postgres_store`` builds the PostgreSQL store from a ``--store postgres[:<conninfo>]`` spec
(the factory lives here so the host imports psycopg only when that store is chosen).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from durable_host.store.postgres import PostgresStore


def postgres_store(
    spec: str,
    hub_name: str,
    on_lost: Callable[[str], None],
    read_only: bool = False,
    *,
    partition_count: int | None = None,
    version: str = "",
) -> PostgresStore:
    """``postgres`` (the connection from ``DURABLE_HOST_POSTGRES``) or ``postgres:<conninfo>``;
    the hub from host.json unless ``DURABLE_HOST_HUB`` overrides it; ``partition_count``
    from host.json as on Azure (default ``ownership.DEFAULT_PARTITIONS``). Raises
    ``PostgresSettingsError`` (a ``ValueError``) for a missing or malformed setting."""
    from durable_host.store.postgres import PostgresStore, from_spec

    hub = os.environ.get("DURABLE_HOST_HUB") or hub_name
    from durable_host.cluster.ownership import DEFAULT_PARTITIONS

    return PostgresStore(
        from_spec(spec, hub),
        on_lost=on_lost,
        read_only=read_only,
        partition_count=partition_count or DEFAULT_PARTITIONS,
        version=version,
    )
