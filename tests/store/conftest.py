"""Store-level fixtures: run an async test body against a freshly opened store of each kind.

``run_store(body)`` opens a store (SQLite in the test's tmp dir, or Azure Storage on the
session's Azurite with a hub of its own, or PostgreSQL on the session's private server with
a hub schema of its own), awaits ``body(store)`` inside one
``asyncio.run`` (the SDK's clients belong to one event loop) and closes the store.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from durable_host.store.sqlite.store import SqliteStore
from tests.harness import store_specs

Body = Callable[[Any], Awaitable[Any]]


def open_kind(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest, hub: str, read_only: bool = False
) -> Any:
    if kind == "sqlite":
        return SqliteStore(tmp_path / f"{hub}.db", read_only=read_only)
    if kind == "postgres":
        from durable_host.store.postgres import PostgresStore, from_spec

        url = request.getfixturevalue("postgres_url")
        return PostgresStore(from_spec(f"postgres:{url}", hub, env={}), read_only=read_only)
    from durable_host.store.azure import AzureStore

    return AzureStore(request.getfixturevalue("azurite_connection"), hub, read_only=read_only)


def fail_postgres_commit(patch: pytest.MonkeyPatch) -> None:
    """Make the next PostgreSQL commit fail inside its transaction, after history, status and
    the outbox were written (the episode function has run; its COMMIT is next)."""
    from durable_host.store.postgres import functions

    class WrittenThenFail(functions.EpisodeOutcome):
        def __init__(self, row: Any) -> None:
            super().__init__(row)
            raise RuntimeError("injected failure before the commit")

    patch.setattr(functions, "EpisodeOutcome", WrittenThenFail)


@pytest.fixture(params=["sqlite", "azure", "postgres"])
def kind(request: pytest.FixtureRequest) -> str:
    if request.param == "azure" and "azure" not in store_specs():
        pytest.skip("DURABLE_TEST_STORES does not include azure")
    return str(request.param)


@pytest.fixture
def run_store(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Callable[[Body], Any]:
    hub = "C" + uuid.uuid4().hex[:12]

    def run(body: Body) -> Any:
        async def main() -> Any:
            store = open_kind(kind, tmp_path, request, hub)
            await store.open()
            try:
                return await body(store)
            finally:
                await store.close()

        return asyncio.run(main())

    return run
