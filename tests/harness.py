"""The test suite's view of the host's testing kit, plus where the test apps and stores are.

``HostProcess``, ``Response``, ``wait_for`` and ``WEBHOOK`` live in ``durable_host.testing``
(benchmarks use them too); this module adds the repository's test apps and the choice of
stores (``DURABLE_TEST_STORES``).
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from durable_host.testing import WEBHOOK, HostProcess, Response, wait_for

__all__ = [
    "APPS",
    "METRICS",
    "ROOT",
    "WEBHOOK",
    "HostProcess",
    "Response",
    "settled",
    "store_spec_for",
    "store_specs",
    "wait_for",
]

ROOT = Path(__file__).resolve().parents[1]
APPS = Path(__file__).resolve().parent / "apps"
METRICS = "/admin/host/metrics"


def store_specs() -> list[str]:
    """Stores the end-to-end suites run against: ``DURABLE_TEST_STORES`` (default sqlite;
    any of sqlite, azure, postgres, comma-separated)."""
    return [
        s.strip() for s in os.environ.get("DURABLE_TEST_STORES", "sqlite").split(",") if s.strip()
    ]


def store_spec_for(kind: str, tmp_path: Path, name: str = "hub") -> str:
    if kind == "sqlite":
        return f"sqlite:{tmp_path / (name + '.db')}"
    return kind


def work_done(metrics: dict[str, Any]) -> dict[str, int] | None:
    """The host's work counters (episodes, activity runs, entity batches, timer runs...), or
    None while something is ready or an activity runs. Storage round trips are left out: an
    idle host still polls its store."""
    if metrics.get("ready") or metrics.get("running_activities"):
        return None
    return {k: v for k, v in metrics.items() if isinstance(v, int) and k != "store_round_trips"}


def settled(
    host: HostProcess,
    *,
    times: int = 5,
    interval: float = 0.1,
    timeout: float = 30.0,
    fetch: Callable[[], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Wait until the host has nothing left to do: its metrics (``fetch``; default a GET of
    ``METRICS``) show nothing ready, no activity running and the same work counters
    ``times`` polls in a row; returns the last metrics.

    The counters matter: a running episode is in neither ``ready`` nor
    ``running_activities``, and ``episodes`` (``entity_batches``) counts one only after its
    commit and the fault points after it, so counters that stay put mean the last episode got
    past them. A slow machine makes this wait longer, never wrong.
    """
    read = fetch or (lambda: host.get(METRICS).json())
    deadline = time.monotonic() + timeout
    seen: deque[dict[str, int] | None] = deque(maxlen=times)
    while True:
        metrics = read()
        seen.append(work_done(metrics))
        if len(seen) == times and seen[0] is not None and all(s == seen[0] for s in seen):
            return metrics
        if time.monotonic() > deadline:
            raise AssertionError(f"the host did not settle within {timeout}s: {metrics}")
        time.sleep(interval)


def kernel_function_app() -> Any:
    """The kernel's ``function_app`` module, even where a test app's module of that name was
    imported first in this process (the unit tests load several)."""
    path = ROOT / "function_app.py"
    loaded = sys.modules.get("function_app")
    if loaded is not None and Path(loaded.__file__ or "").resolve() == path:
        return loaded
    spec = importlib.util.spec_from_file_location("kernel_function_app", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
