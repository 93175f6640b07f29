"""NCRONTAB and TimeSpan schedules, time zones, and the timer-trigger status decisions."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import azure.functions as func
import pytest

from durable_host.core import history as h
from durable_host.functions.loader import index_functions
from durable_host.store.sqlite.store import SqliteStore
from durable_host.triggers import ncrontab
from durable_host.triggers import timer as timer_triggers

T0 = datetime(2026, 1, 1, tzinfo=UTC)  # a Thursday


def nxt(expression: str, after: datetime, zone: str | None = None) -> datetime | None:
    return ncrontab.parse(expression, ncrontab.time_zone(zone)).next_after(after)


@pytest.mark.parametrize(
    ("expression", "after", "expected"),
    [
        ("*/5 * * * * *", T0 + timedelta(seconds=2), T0 + timedelta(seconds=5)),
        ("*/5 * * * * *", T0 + timedelta(seconds=5), T0 + timedelta(seconds=10)),  # strictly after
        ("0 */5 * * * *", T0, T0 + timedelta(minutes=5)),
        ("0 30 9 * * Mon-Fri", T0 + timedelta(days=2), datetime(2026, 1, 5, 9, 30, tzinfo=UTC)),
        ("0 0 0 1 Feb *", T0, datetime(2026, 2, 1, tzinfo=UTC)),
        ("0 0 12 * * 0", T0, datetime(2026, 1, 4, 12, tzinfo=UTC)),  # 0 = Sunday
        ("0 0 0 13 * 5", T0, datetime(2026, 2, 13, tzinfo=UTC)),  # day AND weekday (Friday 13th)
        ("0 0 0 29 2 *", T0, datetime(2028, 2, 29, tzinfo=UTC)),
        ("5,10-12 0 0 * * *", T0 + timedelta(seconds=6), T0 + timedelta(seconds=10)),
        (
            "0 0 0 31 12 *",
            datetime(2026, 12, 31, 0, 0, 1, tzinfo=UTC),
            datetime(2027, 12, 31, tzinfo=UTC),
        ),
    ],
)
def test_next_occurrence(expression: str, after: datetime, expected: datetime) -> None:
    assert nxt(expression, after) == expected


def test_a_time_zone_keeps_local_wall_time_and_skips_the_missing_hour() -> None:
    # 09:00 in Berlin is 08:00 UTC in winter and 07:00 UTC in summer.
    assert nxt("0 0 9 * * *", T0, "Europe/Berlin") == datetime(2026, 1, 1, 8, tzinfo=UTC)
    assert nxt("0 0 9 * * *", datetime(2026, 7, 1, tzinfo=UTC), "Europe/Berlin") == datetime(
        2026, 7, 1, 7, tzinfo=UTC
    )
    # 02:30 does not exist on 29 March 2026 in Berlin: the next one is a day later.
    assert nxt("0 30 2 * * *", datetime(2026, 3, 28, 3, tzinfo=UTC), "Europe/Berlin") == datetime(
        2026, 3, 30, 0, 30, tzinfo=UTC
    )
    # 02:30 happens twice on 25 October 2026: it fires once, at the first.
    first = nxt("0 30 2 * * *", datetime(2026, 10, 24, 12, tzinfo=UTC), "Europe/Berlin")
    assert first == datetime(2026, 10, 25, 0, 30, tzinfo=UTC)
    assert nxt("0 30 2 * * *", first, "Europe/Berlin") == datetime(2026, 10, 26, 1, 30, tzinfo=UTC)
    assert ncrontab.time_zone("W. Europe Standard Time") == ncrontab.time_zone("Europe/Berlin")


def test_a_timespan_counts_from_its_previous_occurrence() -> None:
    span = ncrontab.parse("00:00:30")
    assert span.next_after(T0) == T0 + timedelta(seconds=30)
    assert span.next_after(T0 + timedelta(seconds=70), T0) == T0 + timedelta(seconds=90)
    assert ncrontab.parse("1.02:00:00").interval == timedelta(days=1, hours=2)


@pytest.mark.parametrize(
    ("expression", "words"),
    [
        ("* * * * *", "six NCRONTAB fields"),
        ("60 * * * * *", "second field: 60 is outside 0-59"),
        ("0 0 24 * * *", "hour field"),
        ("0 0 0 0 * *", "day field"),
        ("0 0 0 * 13 *", "month field"),
        ("0 0 0 * * 7", "day-of-week field"),
        ("0 0 0 * * Funday", "not a number"),
        ("*/0 * * * * *", "step"),
        ("0 0 5-1 * * *", "runs backwards"),
        ("0 0 0 30 2 *", "never occurs"),
        ("00:00:00", "longer than zero"),
        ("25:00:00", "hours 0-23"),
        ("", "six NCRONTAB fields"),
    ],
)
def test_a_bad_schedule_says_what_is_wrong(expression: str, words: str) -> None:
    with pytest.raises(ncrontab.ScheduleError, match=words):
        ncrontab.parse(expression)


def test_an_unknown_time_zone_is_refused() -> None:
    with pytest.raises(ncrontab.ScheduleError, match="unknown time zone 'Mars/Base'"):
        ncrontab.time_zone("Mars/Base")
    assert ncrontab.time_zone(None) is UTC


def _index(**timers: dict[str, object]) -> object:
    app = func.FunctionApp()
    for name, options in timers.items():

        def run(timer: func.TimerRequest) -> None:
            pass

        run.__name__ = name
        app.timer_trigger(arg_name="timer", **options)(run)  # type: ignore[arg-type]
    return index_functions(app)


def test_plan_reads_settings_and_the_monitor_default() -> None:
    index = _index(
        fast={"schedule": "*/10 * * * * *"},
        hourly={"schedule": "%HOURLY%", "run_on_startup": True},
        forced={"schedule": "*/10 * * * * *", "use_monitor": True},
    )
    specs = {s.name: s for s in timer_triggers.plan(index, {"HOURLY": "0 0 * * * *"}, T0)}
    assert specs["fast"].use_monitor is False  # occurrences less than a minute apart
    assert specs["hourly"].use_monitor is True and specs["hourly"].run_on_startup is True
    assert specs["forced"].use_monitor is True
    with pytest.raises(timer_triggers.TimerConfigError, match="'hourly'.*HOURLY"):
        timer_triggers.plan(index, {}, T0)
    with pytest.raises(timer_triggers.TimerConfigError, match="WEBSITE_TIME_ZONE"):
        timer_triggers.plan(index, {"HOURLY": "0 0 * * * *", "WEBSITE_TIME_ZONE": "Nowhere"}, T0)


def test_upcoming_fires_a_missed_occurrence_once_only_with_the_monitor() -> None:
    index = _index(hourly={"schedule": "0 0 * * * *"}, quick={"schedule": "*/10 * * * * *"})
    specs = {s.name: s for s in timer_triggers.plan(index, {}, T0)}
    now = T0 + timedelta(hours=5, minutes=3)
    stale = {"Last": h.format_time(T0), "Next": h.format_time(T0 + timedelta(hours=1))}
    assert timer_triggers.upcoming(specs["hourly"], stale, now) == T0 + timedelta(hours=1)
    assert timer_triggers.upcoming(specs["quick"], stale, now) == now + timedelta(seconds=10)
    assert timer_triggers.upcoming(specs["hourly"], {}, now) == T0 + timedelta(hours=6)


def test_two_hosts_on_one_store_run_each_occurrence_once(tmp_path: Path) -> None:
    """The claim is a compare-and-swap: of two runners only one runs each occurrence."""
    runs: list[tuple[str, str]] = []
    app = func.FunctionApp()

    def tick(timer: func.TimerRequest) -> None:
        runs.append((timer.schedule_status["Last"], str(timer.past_due)))

    app.timer_trigger(arg_name="timer", schedule="* * * * * *", use_monitor=True)(tick)
    specs = timer_triggers.plan(index_functions(app), {}, datetime.now(UTC))

    async def main() -> None:
        store = SqliteStore(tmp_path / "hub.db")
        await store.open()
        runners = [
            timer_triggers.TimerTriggers(specs, store, lambda: "{}", str(tmp_path)) for _ in "ab"
        ]
        for runner in runners:
            runner.start()
        try:
            for _ in range(200):  # bounded: at most 10 s
                if len(runs) >= 3:
                    break
                await asyncio.sleep(0.05)
        finally:
            for runner in runners:
                await runner.stop()
            status = json.loads(await store.get_schedule("tick") or "{}")
            await store.close()
        assert len(runs) >= 3
        assert len({last for last, _ in runs}) == len(runs)  # no occurrence ran twice
        assert sum(r.stats["timer_skipped"] for r in runners) >= 1  # both contended
        assert status["Last"] == max(last for last, _ in runs)

    asyncio.run(main())
