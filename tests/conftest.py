"""Shared fixtures: a real host process per test, parametrised over the stores under test.

The suite's hooks that keep every file a test writes under pytest's temp dirs come from
``tests/temp_check.py``.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import APPS, HostProcess, store_spec_for, store_specs
from tests.temp_check import (  # noqa: F401 - hooks, found by name
    pytest_configure,
    pytest_sessionfinish,
    pytest_terminal_summary,
)


@pytest.fixture(params=store_specs())
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="session")
def azurite_connection(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One in-memory Azurite on free ports for the whole session, started on first use.

    Tests that need it are skipped only when ``DURABLE_TEST_STORES`` leaves azure out.
    """
    if "azure" not in store_specs():
        pytest.skip("DURABLE_TEST_STORES does not include azure")
    from durable_host.ops import azurite

    log = tmp_path_factory.mktemp("azurite") / "azurite.log"
    emulator = azurite.start(None, azurite.free_ports(3), in_memory=True, log=log)
    yield emulator.connection_string
    emulator.stop()


@pytest.fixture(scope="session", autouse=True)
def _azure_storage_for_hosts(request: pytest.FixtureRequest) -> Iterator[None]:
    """With azure among the stores under test, export the session Azurite's connection
    string as ``AzureWebJobsStorage``, the setting host processes read (as Functions does)."""
    if "azure" not in store_specs():
        yield
        return
    previous = os.environ.get("AzureWebJobsStorage")
    os.environ["AzureWebJobsStorage"] = request.getfixturevalue("azurite_connection")
    yield
    if previous is None:
        os.environ.pop("AzureWebJobsStorage", None)
    else:
        os.environ["AzureWebJobsStorage"] = previous


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """One private PostgreSQL server for the whole session (``tests/postgres_server.py``),
    started on first use. Skipped only when the server's binaries are missing and
    ``DURABLE_TEST_STORES`` does not ask for postgres (then their absence is a failure)."""
    from tests.postgres_server import PostgresServer, find_bindir

    bindir = find_bindir()
    if bindir is None:
        if "postgres" in store_specs():
            pytest.fail(
                "DURABLE_TEST_STORES asks for postgres but no PostgreSQL server is installed"
            )
        pytest.skip("PostgreSQL's server binaries (Debian: postgresql) are not installed")
    server = PostgresServer(bindir).start()
    _postgres_servers.append(server)
    yield server.url
    server.stop()
    _postgres_servers.remove(server)


_postgres_servers: list[object] = []


@pytest.fixture(scope="session", autouse=True)
def _postgres_for_hosts(request: pytest.FixtureRequest) -> Iterator[None]:
    """With postgres among the stores under test, export the session server's URL as
    ``DURABLE_HOST_POSTGRES``, the setting host processes read."""
    if "postgres" not in store_specs():
        yield
        return
    previous = os.environ.get("DURABLE_HOST_POSTGRES")
    os.environ["DURABLE_HOST_POSTGRES"] = request.getfixturevalue("postgres_url")
    yield
    if previous is None:
        os.environ.pop("DURABLE_HOST_POSTGRES", None)
    else:
        os.environ["DURABLE_HOST_POSTGRES"] = previous


@pytest.fixture
def postgres_server(postgres_url: str) -> object:
    """The session's server itself, for fault tests (restart, terminate backends)."""
    return _postgres_servers[-1]


def postgres_env(request: pytest.FixtureRequest, name: str) -> dict[str, str]:
    """Settings for a host on the session's PostgreSQL, a hub (schema) of its own per test."""
    url = request.getfixturevalue("postgres_url")
    hub = "T" + re.sub(r"[^A-Za-z0-9]", "", f"{uuid.uuid4().hex[:10]}{name}")[:40]
    return {"DURABLE_HOST_POSTGRES": url, "DURABLE_HOST_HUB": hub}


def azure_env(request: pytest.FixtureRequest, name: str) -> dict[str, str]:
    """Settings for a host on the session's Azurite, with a hub of its own per test and name."""
    connection = request.getfixturevalue("azurite_connection")
    hub = "T" + re.sub(r"[^A-Za-z0-9]", "", f"{uuid.uuid4().hex[:10]}{name}")[:40]
    return {"AzureWebJobsStorage": connection, "DURABLE_HOST_HUB": hub}


@pytest.fixture
def make_host(tmp_path: Path, store_kind: str, request: pytest.FixtureRequest) -> Iterator:
    hosts: list[HostProcess] = []
    hubs: dict[str, dict[str, str]] = {}

    def factory(
        app: str = "basic", name: str = "hub", env: dict[str, str] | None = None
    ) -> HostProcess:
        env = dict(env or {})
        if store_kind == "azure":
            hub_env = hubs.setdefault(name, azure_env(request, name))
            env = {**hub_env, **env}
        elif store_kind == "postgres":
            hub_env = hubs.setdefault(name, postgres_env(request, name))
            env = {**hub_env, **env}
        host = HostProcess(
            APPS / app,
            store_spec_for(store_kind, tmp_path, name),
            env=env,
            # A SQLite host logs beside its database; the shared stores' in the test's dir too.
            log_path=(
                tmp_path / f"{name}-{len(hosts)}.log"
                if store_kind in ("azure", "postgres")
                else None
            ),
        )
        hosts.append(host)
        return host

    yield factory
    for host in hosts:
        host.kill()


@pytest.fixture
def basic_host(make_host) -> HostProcess:
    return make_host("basic").start()
