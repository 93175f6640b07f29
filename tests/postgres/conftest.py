"""A host process on the session's private PostgreSQL, a hub (schema) of its own per test."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import postgres_env
from tests.harness import APPS, HostProcess

HostFactory = Callable[..., HostProcess]


@pytest.fixture
def pg_host(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[HostFactory]:
    hosts: list[HostProcess] = []
    hubs: dict[str, dict[str, str]] = {}

    def factory(
        app: str = "basic", name: str = "hub", env: dict[str, str] | None = None
    ) -> HostProcess:
        hub_env = hubs.setdefault(name, postgres_env(request, name))
        host = HostProcess(APPS / app, "postgres", env={**hub_env, **(env or {})})
        host.log_path = tmp_path / f"host-{len(hosts)}.log"  # the test's own directory
        hosts.append(host)
        return host

    yield factory
    for host in hosts:
        host.kill()
