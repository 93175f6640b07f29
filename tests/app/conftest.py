"""Fixtures for end-to-end tests of the agent kernel app (the repository root app).

``kernel_host`` is one host per test module (and store kind) serving the root
``function_app.py`` with its own store and content directory; ``fresh_kernel_host`` builds a
per-test host for tests that kill it. ``mailbox`` starts the real mail service process.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from services.mailbox.testing import start_mailbox, stop_mailbox
from tests.app.turn_support import state_store_env
from tests.harness import ROOT, HostProcess, store_spec_for, store_specs


def kernel_env(
    tmp: Path, extra: dict[str, str] | None = None, kind: str = "sqlite"
) -> dict[str, str]:
    return {
        **state_store_env(kind),
        "AGENT_CONTENT_DIR": str(tmp / "content"),
        "AGENT_LEDGER_DIR": str(tmp / "ledger"),
        "AGENT_TOOL_LEDGER_FILE": str(tmp / "tool-ledger.txt"),
        **(extra or {}),
    }


@pytest.fixture(scope="module", params=store_specs())
def kernel_host(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[HostProcess]:
    tmp = tmp_path_factory.mktemp("kernel")
    kind = str(request.param)
    host = HostProcess(ROOT, store_spec_for(kind, tmp, "kernel"), env=kernel_env(tmp, kind=kind))
    host.start()
    yield host
    host.kill()


@pytest.fixture
def fresh_kernel_host(tmp_path: Path, store_kind: str) -> Iterator[Callable[..., HostProcess]]:
    hosts: list[HostProcess] = []

    def factory(env: dict[str, str] | None = None) -> HostProcess:
        env = kernel_env(tmp_path, env, store_kind)
        host = HostProcess(ROOT, store_spec_for(store_kind, tmp_path, "kernel"), env=env)
        hosts.append(host)
        return host

    yield factory
    for host in hosts:
        host.kill()


@pytest.fixture
def mailbox(tmp_path: Path) -> Iterator[str]:
    process, base_url = start_mailbox(tmp_path / "mailbox.db")
    yield base_url
    stop_mailbox(process)
