"""Fixtures of the reliability suite: the kernel app's hosts and the mail service (shared with
``tests/app``), plus ``long_run``: whether the long campaigns were asked for."""

from __future__ import annotations

import os

import pytest

from tests.app.conftest import fresh_kernel_host, kernel_host, mailbox  # noqa: F401

LONG = os.environ.get("DURABLE_RELIABILITY_LONG", "") not in ("", "0")


@pytest.fixture
def long_run() -> bool:
    return LONG
