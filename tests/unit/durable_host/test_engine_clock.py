"""The engine's clock (``engine.loops.utc_now``) writes exactly what ``history.format_time``
writes for the same instant, across a second's boundary too (it formats the date and time
once per second and only the microseconds at each call)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from durable_host.core import history as h
from durable_host.engine import loops


@pytest.mark.parametrize(
    "instants_ns",
    [
        # within one second, then the next second and the next day (the cached part changes)
        [1_796_601_599_000_001_000, 1_796_601_599_999_999_999, 1_796_601_600_000_000_000],
        [0, 999_000, 1_000_000_000],
        [1_796_601_600_123_456_789, 1_796_601_599_500_000_000],  # a clock stepped back
    ],
)
def test_the_clock_formats_each_instant_as_format_time_does(
    monkeypatch: pytest.MonkeyPatch, instants_ns: list[int]
) -> None:
    for ns in instants_ns:
        monkeypatch.setattr(loops.time, "time_ns", lambda ns=ns: ns)
        seconds, micros = ns // 10**9, (ns // 1000) % 10**6
        at = datetime.fromtimestamp(seconds, UTC).replace(microsecond=micros)
        assert loops.utc_now() == h.format_time(at)
