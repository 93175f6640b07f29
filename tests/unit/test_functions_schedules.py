"""The shared schedule parser beyond the timer triggers' cases (those are in
unit/durable_host/test_timer_schedules.py): what croniter would accept but NCRONTAB refuses,
and occurrences across daylight-saving changes checked against a minute-by-minute scan."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from functions_schedules import ScheduleError, parse, time_zone


@pytest.mark.parametrize(
    ("expression", "words"),
    [
        ("0 0 0 L * *", "day field: 'L' is not a number"),
        ("0 0 0 15W * *", "day field: '15W' is not a number"),
        ("0 0 0 ? * *", "day field: '\\?' is not a number"),
        ("0 0 0 * * 1#2", "day-of-week field: '1#2' is not a number"),
        ("H 0 0 * * *", "second field: 'H' is not a number"),
        ("0 0 0 * * 7", "day-of-week field: 7 is outside 0-6"),
        ("0 0 0 * * Sat-Sun", "range 'Sat-Sun' runs backwards"),
        ("0 0 0 1 1 * 2027", "six NCRONTAB fields"),
        ("1,,2 * * * * *", "second field: '' is not a number"),
        ("1-2-3 * * * * *", "'2-3' is not a number"),
        ("0 0 0 * * Jan", "day-of-week field: 'Jan' is not a number"),
        ("0 0 0 31 4 *", "never occurs"),
    ],
)
def test_what_croniter_accepts_beyond_ncrontab_is_refused(expression: str, words: str) -> None:
    with pytest.raises(ScheduleError, match=words):
        parse(expression)


def test_names_and_single_value_steps_read_as_ncrontab_reads_them() -> None:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    schedule = parse("5/15 * * * * *")
    seconds = []
    moment = t0
    for _ in range(5):
        found = schedule.next_after(moment)
        assert found is not None
        seconds.append(found.second)
        moment = found
    assert seconds == [5, 20, 35, 50, 5]
    assert parse("0 0 0 * JAN-mar sun").next_after(t0) == datetime(2026, 1, 4, tzinfo=UTC)


def _scan(after: datetime, zone: ZoneInfo, matches: Callable[[datetime], bool]) -> datetime:
    """The first whole minute after ``after`` whose local wall time matches and has not been
    seen before (a repeated hour fires once): the rule, checked without croniter."""
    moment = after.replace(second=0, microsecond=0) + timedelta(minutes=1)
    for _ in range(60 * 24 * 15):  # fifteen days at most
        local = moment.astimezone(zone)  # fold 1: the second pass of a repeated wall time
        if matches(local) and local.fold == 0:
            return moment
        moment += timedelta(minutes=1)
    raise AssertionError("no occurrence within fifteen days")


@pytest.mark.parametrize(
    ("expression", "matches"),
    [
        ("0 30 2 * * *", lambda t: (t.hour, t.minute) == (2, 30)),
        ("0 15 1-3 * * *", lambda t: t.minute == 15 and 1 <= t.hour <= 3),
        ("0 */20 2 * * Sun", lambda t: t.hour == 2 and t.minute % 20 == 0 and t.weekday() == 6),
        ("0 0 9 * * Mon-Fri", lambda t: (t.hour, t.minute) == (9, 0) and t.weekday() < 5),
    ],
)
@pytest.mark.parametrize("zone_name", ["Europe/Berlin", "America/New_York"])
def test_occurrences_across_daylight_saving_changes_match_a_scan(
    expression: str, matches: Callable[[datetime], bool], zone_name: str
) -> None:
    zone = ZoneInfo(zone_name)
    schedule = parse(expression, time_zone(zone_name))
    # Both changes of 2026 in both zones (March 8/29, November 1/October 25), from before.
    for start in (datetime(2026, 3, 7, tzinfo=UTC), datetime(2026, 10, 24, tzinfo=UTC)):
        moment = start
        for _ in range(12):
            found = schedule.next_after(moment)
            assert found is not None
            assert found == _scan(moment, zone, matches), (expression, zone_name, moment)
            moment = found


def test_after_a_time_in_the_repeated_hour_the_next_occurrence_is_later() -> None:
    # 25 October 2026 in Berlin: 02:00-03:00 happens twice; 02:30 fires at its first (00:30
    # UTC). From 02:10 of the second pass (01:10 UTC) the next is the following day's.
    schedule = parse("0 30 2 * * *", time_zone("Europe/Berlin"))
    second_pass = datetime(2026, 10, 25, 1, 10, tzinfo=UTC)
    assert schedule.next_after(second_pass) == datetime(2026, 10, 26, 1, 30, tzinfo=UTC)
