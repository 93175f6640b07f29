"""Screenshots taken by the page tests, at a fixed window size so they are comparable.

``save`` always writes into the test's own temp dir. With ``DOCS_SCREENSHOTS=1`` in the
environment (``scripts/screenshots`` sets it) it also copies the picture into
``docs/images/``, which is how the pictures in the docs are remade: by running the tests, never
by hand. Without the variable no test writes outside its temp dir.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from tests.browser import DevTools

DOCS_IMAGES = Path(__file__).resolve().parents[1] / "docs" / "images"
WIDTH, HEIGHT = 1280, 860


def window(tools: DevTools, width: int = WIDTH, height: int = HEIGHT) -> None:
    """Give the page a desktop-sized window (headless Chromium's default is 800x600)."""
    tools.call(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
    )


def save(tools: DevTools, tmp_path: Path, name: str) -> Path:
    """``name``.png in ``tmp_path`` (and in docs/images/ when ``DOCS_SCREENSHOTS=1``)."""
    path = tmp_path / f"{name}.png"
    tools.screenshot(path)
    if os.environ.get("DOCS_SCREENSHOTS") == "1":
        shutil.copyfile(path, DOCS_IMAGES / path.name)
    return path
