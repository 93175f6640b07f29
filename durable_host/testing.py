"""Run a real durable host process: start, talk HTTP, SIGKILL, restart. The host's testing kit.

``HostProcess`` starts ``python -m durable_host start`` on port 0 with a given app
directory, store and fault plan (``DURABLE_HOST_FAULTS``), reads the bound port from
its first stdout line, and offers small blocking HTTP helpers (urllib) plus
``wait_for`` polling with a deadline. Every wait is bounded in time. It uses only the
standard library, so tests and benchmarks of any app can drive a host with it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from durable_host.core.records import TERMINAL

# The directory that holds the ``durable_host`` package: the child process imports it from here.
PACKAGE_ROOT = Path(__file__).resolve().parents[1]
WEBHOOK = "/runtime/webhooks/durabletask"


@dataclass
class Response:
    status: int
    body: bytes
    headers: dict[str, str]

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


@dataclass
class HostProcess:
    app_dir: Path
    store: str
    env: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen[str] | None = None
    base_url: str = ""
    log_path: Path | None = None
    cwd: Path | None = None  # working directory (and import root) of the host process
    args: list[str] = field(default_factory=list)  # more ``start`` options (``--auth keys``)
    python: str | None = None  # the interpreter (default: this one); needs the app's packages

    def __post_init__(self) -> None:
        # Each host object on Azure or PostgreSQL gets a task hub of its own (restarts keep
        # it), so hosts of different tests never wait for each other's partitions.
        if self.store == "azure" or self.store.split(":", 1)[0] == "postgres":
            self.env.setdefault("DURABLE_HOST_HUB", "T" + uuid.uuid4().hex[:16])

    def default_log_path(self) -> Path:
        """Beside a SQLite store's file; else in the temporary folder of the process that runs
        the host (under pytest, the run's own: the pytest plugin passes each test's
        ``tmp_path`` instead). Never the app's folder: tests must not write into sources."""
        if self.store.startswith("sqlite:"):
            return Path(self.store.removeprefix("sqlite:") + ".log")
        hub = self.env.get("DURABLE_HOST_HUB", "hub")
        return Path(tempfile.gettempdir()) / f"durable-host-{hub}.log"

    def start(self, faults: str | None = None, timeout: float = 30.0) -> HostProcess:
        env = {**os.environ, **self.env, "PYTHONPATH": str(PACKAGE_ROOT)}
        if self.python and PACKAGE_ROOT.name in ("site-packages", "dist-packages"):
            # An installed host under another interpreter is that environment's own copy:
            # this environment's packages on its path would shadow the ones it was made for.
            del env["PYTHONPATH"]
        env.pop("DURABLE_HOST_FAULTS", None)
        if faults:
            env["DURABLE_HOST_FAULTS"] = faults
        self.log_path = self.log_path or self.default_log_path()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        stderr = open(self.log_path, "a") if self.log_path else subprocess.DEVNULL  # noqa: SIM115
        self.process = subprocess.Popen(
            [
                self.python or sys.executable,
                "-m",
                "durable_host",
                "start",
                "--app-dir",
                str(self.app_dir),
                "--port",
                "0",
                "--store",
                self.store,
                "--grace",
                "2",
                *self.args,
            ],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env=env,
            cwd=str(self.cwd or PACKAGE_ROOT),
        )
        deadline = time.monotonic() + timeout
        assert self.process.stdout is not None
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if "listening on" in line:
                self.base_url = line.strip().rsplit(" ", 1)[-1]
                return self
            if not line and self.process.poll() is not None:
                break
        raise RuntimeError(f"host did not start (exit {self.process.poll()}); see {self.log_path}")

    def kill(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        if self.process:
            self.process.wait(10)

    def stop(self) -> int:
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(20)

    def wait_exit(self, timeout: float = 30.0) -> int:
        """Wait for the process to end by itself (e.g. killed by a fault point)."""
        assert self.process is not None
        return self.process.wait(timeout)

    # --- HTTP ---
    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        raw: bytes | None = None,
        headers: dict[str, str] | None = None,
        timeout: float = 30.0,
    ) -> Response:
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        hdrs = {"Content-Type": "application/json"} if data is not None else {}
        hdrs.update(headers or {})
        req = urllib.request.Request(self.base_url + path, data=data, method=method, headers=hdrs)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return Response(resp.status, resp.read(), dict(resp.headers))
        except urllib.error.HTTPError as err:
            return Response(err.code, err.read(), dict(err.headers))

    def get(self, path: str, **kw: Any) -> Response:
        return self.request("GET", path, **kw)

    def post(self, path: str, body: Any = None, **kw: Any) -> Response:
        return self.request("POST", path, body, **kw)

    def start_orchestration(
        self, name: str, body: Any = None, instance_id: str | None = None
    ) -> str:
        path = f"{WEBHOOK}/orchestrators/{name}" + (f"/{instance_id}" if instance_id else "")
        resp = self.post(path, body)
        assert resp.status == 202, (resp.status, resp.body)
        return resp.json()["id"]

    def status(self, instance_id: str, query: str = "") -> dict[str, Any] | None:
        resp = self.get(f"{WEBHOOK}/instances/{instance_id}{query}")
        return resp.json() if resp.status in (200, 202) else None

    def wait_for_status(
        self,
        instance_id: str,
        statuses: tuple[str, ...] = tuple(TERMINAL),
        timeout: float = 30.0,
    ) -> dict[str, Any]:
        return wait_for(
            lambda: _in(self.status(instance_id), statuses),
            timeout,
            f"{instance_id} to reach {statuses}",
        )


def _in(status: dict[str, Any] | None, statuses: tuple[str, ...]) -> dict[str, Any] | None:
    return status if status and status["runtimeStatus"] in statuses else None


def wait_for(
    probe: Callable[[], Any], timeout: float = 30.0, what: str = "condition", interval: float = 0.05
) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)
