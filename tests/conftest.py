"""Shared fixtures: a real host process per test, parametrised over the stores under test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import APPS, HostProcess, store_spec_for, store_specs


@pytest.fixture(params=store_specs())
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def make_host(tmp_path: Path, store_kind: str) -> Iterator:
    hosts: list[HostProcess] = []

    def factory(app: str = "basic", name: str = "hub", env: dict[str, str] | None = None) -> HostProcess:
        host = HostProcess(APPS / app, store_spec_for(store_kind, tmp_path, name), env=env or {})
        hosts.append(host)
        return host

    yield factory
    for host in hosts:
        host.kill()


@pytest.fixture
def basic_host(make_host) -> HostProcess:
    return make_host("basic").start()
