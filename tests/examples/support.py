"""What the example tests share.

* ``LoopbackServer``, the fake model APIs: ``tests/app/turn_support.LoopbackServer`` (an
  aiohttp app on its own loop in a daemon thread, on a free port of 127.0.0.1, under
  ``/v1``) with one shared ``release`` event (set: requests answer; cleared: a handler that
  waits on it holds its request, so a test can kill the host mid-call). Subclasses add their
  routes in ``routes``.
* ``example_python``: the interpreter of an example's own environment, made (or found up to
  date) by ``scripts/setup-example``; the test skips only when PyPI cannot be reached.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest
from aiohttp import web

from tests.app.turn_support import LoopbackServer as _Served
from tests.harness import ROOT


class LoopbackServer(_Served):
    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.release.set()

    def routes(self, app: web.Application) -> None:
        raise NotImplementedError

    def _routes(self, app: web.Application) -> None:
        self.routes(app)

    def _release(self) -> None:
        self.release.set()


def example_python(example: str, suffix: str, probe: str) -> Path:
    """``.venv-<suffix>/bin/python`` for ``examples/<example>``; ``probe``: a package of the
    example's requirements, asked of PyPI when the set-up fails (to tell "offline" apart)."""
    setup = subprocess.run(
        [str(ROOT / "scripts" / "setup-example"), example, suffix],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if setup.returncode != 0:
        probed = subprocess.run(
            [sys.executable, "-m", "pip", "index", "versions", probe],
            capture_output=True,
            timeout=120,
        )
        if probed.returncode != 0:
            pytest.skip(f"PyPI is unreachable: .venv-{suffix} cannot be installed")
        pytest.fail(f"scripts/setup-example {example} {suffix} failed:\n{setup.stderr[-4000:]}")
    return ROOT / f".venv-{suffix}" / "bin" / "python"
