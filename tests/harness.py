"""The test suite's view of the host's testing kit, plus where the test apps and stores are.

``HostProcess``, ``Response``, ``wait_for`` and ``WEBHOOK`` live in ``durable_host.testing``
(benchmarks use them too); this module adds the repository's test apps and the choice of
stores (``DURABLE_TEST_STORES``).
"""

from __future__ import annotations

import os
from pathlib import Path

from durable_host.testing import WEBHOOK, HostProcess, Response, wait_for

__all__ = [
    "APPS",
    "ROOT",
    "WEBHOOK",
    "HostProcess",
    "Response",
    "store_spec_for",
    "store_specs",
    "wait_for",
]

ROOT = Path(__file__).resolve().parents[1]
APPS = Path(__file__).resolve().parent / "apps"


def store_specs() -> list[str]:
    """Stores the end-to-end suites run against: ``DURABLE_TEST_STORES`` (default sqlite)."""
    return [
        s.strip() for s in os.environ.get("DURABLE_TEST_STORES", "sqlite").split(",") if s.strip()
    ]


def store_spec_for(kind: str, tmp_path: Path, name: str = "hub") -> str:
    if kind == "sqlite":
        return f"sqlite:{tmp_path / (name + '.db')}"
    return kind
