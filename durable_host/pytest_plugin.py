"""pytest fixtures that run a Durable Functions app on the host, one real process per test.

Installed with the host (the ``pytest11`` entry point), so a project's tests only ask for
the fixtures::

    def test_order(durable_host_factory):
        host = durable_host_factory("path/to/app")           # started, fresh store in tmp_path
        instance = host.start_new("process_order", {"id": 7})
        assert host.wait_for_completion(instance)["output"] == "shipped"

``durable_host`` is the same for the app directory the ``durable_app_dir`` fixture names
(by default the ini option ``durable_host_app_dir``, else the directory of the rootdir's
``function_app.py``); override that fixture in a ``conftest.py`` to point elsewhere.

Each handle is a ``durable_host.testing.HostProcess`` underneath (a real process on a free
port, logs beside its store), so ``kill()`` is a SIGKILL and ``restart()`` starts a new
process on the same store: crash tests need nothing else. Every wait is bounded.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from durable_host.core.records import TERMINAL
from durable_host.testing import WEBHOOK, HostProcess, Response, wait_for

__all__ = ["DurableHost"]


class DurableHost:
    """A running host serving one app, with the durable client's operations over HTTP."""

    def __init__(self, process: HostProcess) -> None:
        self.process = process

    @property
    def base_url(self) -> str:
        return self.process.base_url

    @property
    def log_path(self) -> Path | None:
        """The host's log (its stderr): the start-up listing, every failure."""
        return self.process.log_path

    # --- the process ---

    def kill(self) -> None:
        """SIGKILL the host, as a crash would (nothing is flushed or stopped cleanly)."""
        self.process.kill()

    def restart(self, timeout: float = 30.0) -> DurableHost:
        """Start a new host process on the same app and store (after ``kill`` or ``stop``)."""
        self.process.kill()
        self.process.start(timeout=timeout)
        return self

    def stop(self) -> int:
        """SIGTERM: the host stops gracefully; its exit status."""
        return self.process.stop()

    # --- HTTP ---

    def request(self, method: str, path: str, body: Any = None, **kw: Any) -> Response:
        return self.process.request(method, path, body, **kw)

    def get(self, path: str, **kw: Any) -> Response:
        return self.process.get(path, **kw)

    def post(self, path: str, body: Any = None, **kw: Any) -> Response:
        return self.process.post(path, body, **kw)

    # --- the durable client (the management API) ---

    def start_new(
        self, orchestrator: str, input: Any = None, instance_id: str | None = None
    ) -> str:
        """Start an orchestration; its instance id once the host has it durably."""
        return self.process.start_orchestration(orchestrator, input, instance_id)

    def status(self, instance_id: str, *, history: bool = False) -> dict[str, Any] | None:
        """The instance's status (with ``historyEvents`` and their results when ``history``),
        or None if there is no such instance."""
        query = "?showHistory=true&showHistoryOutput=true" if history else ""
        return self.process.status(instance_id, query)

    def wait_for_status(
        self,
        instance_id: str,
        statuses: str | Sequence[str] = tuple(TERMINAL),
        timeout: float = 30.0,
        *,
        history: bool = False,
    ) -> dict[str, Any]:
        """Poll until the instance is in one of ``statuses``; AssertionError after ``timeout``."""
        wanted = (statuses,) if isinstance(statuses, str) else tuple(statuses)

        def probe() -> dict[str, Any] | None:
            found = self.status(instance_id, history=history)
            return found if found and found["runtimeStatus"] in wanted else None

        result: dict[str, Any] = wait_for(probe, timeout, f"{instance_id} to reach {wanted}")
        return result

    def wait_for_completion(self, instance_id: str, timeout: float = 30.0) -> dict[str, Any]:
        """Wait for a terminal status and require it to be Completed (else AssertionError
        with the status, so a failure shows its reason)."""
        final = self.wait_for_status(instance_id, timeout=timeout)
        assert final["runtimeStatus"] == "Completed", json.dumps(final, indent=1)[:4000]
        return final

    def wait_for_custom_status(
        self, instance_id: str, value: Any, timeout: float = 30.0
    ) -> dict[str, Any]:
        """Poll until the instance's custom status equals ``value`` (a phase it publishes)."""

        def probe() -> dict[str, Any] | None:
            found = self.status(instance_id)
            return found if found and found.get("customStatus") == value else None

        result: dict[str, Any] = wait_for(probe, timeout, f"{instance_id} to say {value!r}")
        return result

    def raise_event(self, instance_id: str, event: str, data: Any = None) -> None:
        path = f"{WEBHOOK}/instances/{_q(instance_id)}/raiseEvent/{_q(event)}"
        self._accepted(
            self.post(
                path, raw=json.dumps(data).encode(), headers={"Content-Type": "application/json"}
            ),
            "raise event",
        )

    def terminate(self, instance_id: str, reason: str = "terminated by a test") -> None:
        self._action(instance_id, "terminate", reason)

    def suspend(self, instance_id: str, reason: str = "suspended by a test") -> None:
        self._action(instance_id, "suspend", reason)

    def resume(self, instance_id: str, reason: str = "resumed by a test") -> None:
        self._action(instance_id, "resume", reason)

    def purge(self, instance_id: str) -> bool:
        """Delete a finished instance's history; False if there was none."""
        resp = self.request("DELETE", f"{WEBHOOK}/instances/{_q(instance_id)}")
        if resp.status == 404:
            return False
        assert resp.status == 200, (resp.status, resp.body)
        return True

    def signal_entity(self, name: str, key: str, operation: str, input: Any = None) -> None:
        path = f"{WEBHOOK}/entities/{_q(name)}/{_q(key)}?op={_q(operation)}"
        self._accepted(self.post(path, input), "signal entity")

    def entity_state(self, name: str, key: str) -> Any:
        """The entity's state, or None if it does not exist."""
        resp = self.get(f"{WEBHOOK}/entities/{_q(name)}/{_q(key)}")
        return resp.json() if resp.status == 200 else None

    def _action(self, instance_id: str, action: str, reason: str) -> None:
        path = f"{WEBHOOK}/instances/{_q(instance_id)}/{action}?reason={_q(reason)}"
        self._accepted(self.post(path), action)

    @staticmethod
    def _accepted(resp: Response, what: str) -> None:
        assert resp.status == 202, f"{what}: {resp.status} {resp.body!r}"


def _q(text: str) -> str:
    return urllib.parse.quote(text, safe="")


Factory = Callable[..., DurableHost]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        "durable_host_app_dir",
        "the app directory of the durable_host fixture (relative to the rootdir)",
        default="",
    )


@pytest.fixture
def durable_host_factory(tmp_path: Path) -> Iterator[Factory]:
    """``factory(app_dir, *, store=None, env=None, args=(), python=None)`` -> a started
    ``DurableHost``.

    ``store``: the host's ``--store`` (default: a fresh SQLite file in the test's tmp
    directory); ``env``: settings for the host process (over ``local.settings.json``);
    ``args``: more ``start`` options (``["--auth", "keys"]``); ``python``: the interpreter of
    the host process (default: the test's), for an app whose packages live in another
    environment. Every host is killed at the end of the test."""
    hosts: list[DurableHost] = []

    def factory(
        app_dir: str | Path,
        *,
        store: str | None = None,
        env: dict[str, str] | None = None,
        args: Sequence[str] = (),
        timeout: float = 60.0,
        python: str | Path | None = None,
    ) -> DurableHost:
        app = Path(app_dir).resolve()
        spec = store or f"sqlite:{tmp_path / f'durable-host-{len(hosts)}.db'}"
        process = HostProcess(
            app,
            spec,
            env=dict(env or {}),
            cwd=app,
            args=list(args),
            python=str(python) if python else None,
        )
        host = DurableHost(process)
        hosts.append(host)
        process.start(timeout=timeout)
        return host

    yield factory
    for host in hosts:
        host.kill()


@pytest.fixture
def durable_app_dir(pytestconfig: pytest.Config) -> Path:
    """The app of the ``durable_host`` fixture; override this fixture to choose another."""
    configured = str(pytestconfig.getini("durable_host_app_dir") or "")
    root = Path(pytestconfig.rootpath)
    app = (root / configured) if configured else root
    if not (app / "function_app.py").is_file():
        pytest.fail(
            f"durable_host: no function_app.py in {app}; set the ini option durable_host_app_dir"
            " or override the durable_app_dir fixture"
        )
    return app


@pytest.fixture
def durable_host(durable_host_factory: Factory, durable_app_dir: Path) -> DurableHost:
    """A host serving ``durable_app_dir`` on a fresh store, killed after the test."""
    return durable_host_factory(durable_app_dir)
