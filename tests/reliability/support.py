"""What both crash campaigns share: hosts of the reliability app, requests that survive a host
that dies under them, and the ledger oracle.

A campaign never trusts the system under test to say what happened: expected outputs are
computed here, and every run of an activity is read back from the ledger file the app's
``effect`` activity appends to (``walk_app/function_app.py``), outside the host.
"""

from __future__ import annotations

import http.client
import re
import time
import urllib.error
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.harness import METRICS, WEBHOOK, HostProcess, Response, store_spec_for
from tests.harness import settled as harness_settled

APP = Path(__file__).resolve().parent / "walk_app"
TERMINAL = ("Completed", "Failed", "Terminated")


class HostDied(Exception):
    """The host process ended (a fault point or a kill) while a request was in flight."""


def reliability_host(
    request: pytest.FixtureRequest, kind: str, tmp: Path, name: str, env: dict[str, str]
) -> HostProcess:
    """A host of the reliability app with a store of its own (a file, or a hub on Azurite)."""
    env = dict(env)
    if kind == "azure":
        connection = request.getfixturevalue("azurite_connection")
        hub = "R" + re.sub(r"[^A-Za-z0-9]", "", uuid.uuid4().hex[:12] + name)[:40]
        env.update(AzureWebJobsStorage=connection, DURABLE_HOST_HUB=hub)
    return HostProcess(APP, store_spec_for(kind, tmp, name), env=env)


def alive(host: HostProcess) -> bool:
    return host.process is not None and host.process.poll() is None


def call(host: HostProcess, method: str, path: str, body: Any = None) -> Response:
    """One request; ``HostDied`` when the host is gone or goes away before it answers."""
    if not alive(host):
        raise HostDied()
    try:
        return host.request(method, path, body, timeout=15)
    except (urllib.error.URLError, ConnectionError, http.client.HTTPException, TimeoutError) as exc:
        if alive(host):
            time.sleep(0.2)
            if alive(host):
                raise
        raise HostDied() from exc


def status(host: HostProcess, instance_id: str) -> dict[str, Any] | None:
    resp = call(host, "GET", f"{WEBHOOK}/instances/{instance_id}")
    return resp.json() if resp.status in (200, 202) else None


def wait_terminal(host: HostProcess, instance_id: str, timeout: float = 45) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = status(host, instance_id)
        if found and found["runtimeStatus"] in TERMINAL:
            return found
        time.sleep(0.05)
    raise AssertionError(f"{instance_id} did not end within {timeout}s")


def settled(host: HostProcess, times: int = 5, timeout: float = 30) -> dict[str, Any]:
    """``harness.settled`` through ``call``: ``HostDied`` when the host ends meanwhile (a fault
    point passed late)."""
    return harness_settled(
        host, times=times, timeout=timeout, fetch=lambda: call(host, "GET", METRICS).json()
    )


def start_once(host: HostProcess, name: str, instance_id: str, body: Any) -> None:
    """Start ``instance_id`` unless it exists: a start the host accepted is never repeated."""
    if status(host, instance_id) is None:
        resp = call(host, "POST", f"{WEBHOOK}/orchestrators/{name}/{instance_id}", body)
        assert resp.status == 202, (resp.status, resp.body)


@dataclass
class Ledger:
    path: Path

    def counts(self) -> Counter[str]:
        if not self.path.exists():
            return Counter()
        return Counter(line for line in self.path.read_text().splitlines() if line)


@dataclass
class Verdict:
    """One run checked against the oracle."""

    lost: list[str] = field(default_factory=list)  # expected effects that never happened
    wrong: list[str] = field(default_factory=list)  # outputs or effects that differ
    duplicates: int = 0  # activity runs beyond the first (the at-least-once window)


def check_effects(counts: Counter[str], expected: set[str], verdict: Verdict) -> None:
    for key in sorted(expected):
        if counts[key] == 0:
            verdict.lost.append(f"effect {key}")
        verdict.duplicates += max(0, counts[key] - 1)
    for key in sorted(set(counts) - expected):
        verdict.wrong.append(f"unexpected effect {key}")


def until(probe: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := probe():
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")
