"""The scale-out campaign (``tests/reliability/test_scale_out.py``) on PostgreSQL, in every
run: three hosts on one hub, the busiest SIGKILLed, its partitions taken within the lease,
every chain finished with nothing lost (``DURABLE_RELIABILITY_LONG=1``: four hosts, five
kills with replacements)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.reliability.conftest import LONG
from tests.reliability.test_scale_out import campaign


@pytest.mark.timeout(900 if LONG else 300)
def test_hosts_share_a_postgres_hub_and_a_killed_hosts_work_resumes_elsewhere(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    request.getfixturevalue("postgres_url")  # the session's server (skips without one)
    campaign("postgres", tmp_path, request)
