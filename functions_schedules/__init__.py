"""Timer schedules as Azure Functions reads them: one parser for the host and the app (pure:
no clock, no IO).

The host's timer triggers (``durable_host.triggers.ncrontab``) and the app's loops (``kernel.loops.cron``)
both read schedules; the app may not import its host and the host may not import the app,
so this small package, which imports neither, is the one both use. It ships with the app
(the deployment's root) and with the host's wheel.

Two forms, as ``TimerTriggerAttribute`` accepts:

* six-field NCRONTAB ``{second} {minute} {hour} {day} {month} {day-of-week}``: ``*``,
  lists ``a,b``, ranges ``a-b``, steps ``*/n``, ``a/n`` and ``a-b/n``, month names
  ``Jan``-``Dec`` and day names ``Sun``-``Sat`` (day of week 0-6, 0 = Sunday). Day of month
  and day of week must *both* match, as NCrontab evaluates them (classic cron ORs them).
* a ``TimeSpan`` ``[d.]hh:mm:ss``: a fixed interval from the previous occurrence.

``croniter`` computes the occurrences (seconds field first, day fields ANDed). What it
accepts beyond NCRONTAB is refused here before it sees the expression: ``L``, ``W``, ``#``,
``?``, ``H``, a seventh (year) field, 7 for Sunday and ranges that wrap around (``Sat-Sun``);
the error names the field and what is wrong with it.

Cron expressions are evaluated in local wall time of the time zone (``WEBSITE_TIME_ZONE``,
an IANA name; a few common Windows names are mapped), so ``0 0 9 * * *`` fires at 09:00
local time across daylight-saving changes. croniter walks naive wall time here and this
module places each occurrence in the zone: a local time that does not exist (the hour
skipped in spring) is skipped; one that occurs twice (autumn) fires once, at its first
occurrence.

A schedule that is malformed, or that never fires within five years (``0 0 0 30 2 *``), is
refused with ``ScheduleError``: a caller refuses it up front rather than never running it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadDateError, CroniterError, croniter

__all__ = ["Schedule", "ScheduleError", "parse", "time_zone"]

_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
# (name, low, high, names): the six fields in order.
_FIELDS = (
    ("second", 0, 59, ()),
    ("minute", 0, 59, ()),
    ("hour", 0, 23, ()),
    ("day", 1, 31, ()),
    ("month", 1, 12, _MONTHS),
    ("day-of-week", 0, 6, _DAYS),
)
_TIMESPAN = re.compile(r"^(?:(\d+)\.)?(\d{1,2}):(\d{1,2}):(\d{1,2})$")
_HORIZON_YEARS = 5
# A date croniter's checks accept for any valid expression (it only builds, never walks).
_PROBE = datetime(2026, 1, 1)
# The Windows names a Functions app most often carries, for apps moved from Windows plans.
_WINDOWS_ZONES = {
    "UTC": "UTC",
    "GMT Standard Time": "Europe/London",
    "W. Europe Standard Time": "Europe/Berlin",
    "Central Europe Standard Time": "Europe/Budapest",
    "Romance Standard Time": "Europe/Paris",
    "Eastern Standard Time": "America/New_York",
    "Central Standard Time": "America/Chicago",
    "Mountain Standard Time": "America/Denver",
    "Pacific Standard Time": "America/Los_Angeles",
    "China Standard Time": "Asia/Shanghai",
    "Tokyo Standard Time": "Asia/Tokyo",
    "India Standard Time": "Asia/Kolkata",
    "AUS Eastern Standard Time": "Australia/Sydney",
}


class ScheduleError(ValueError):
    pass


def time_zone(name: str | None) -> tzinfo:
    """The zone named by ``WEBSITE_TIME_ZONE`` (None or empty: UTC)."""
    if not name or not name.strip():
        return UTC
    name = name.strip()
    try:
        return ZoneInfo(_WINDOWS_ZONES.get(name, name))
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ScheduleError(
            f"unknown time zone {name!r}: use an IANA name such as 'Europe/Berlin'"
        ) from exc


def _check_field(text: str, name: str, low: int, high: int, names: tuple[str, ...]) -> None:
    """Refuse what NCRONTAB does not accept in one field, naming the field and the reason.
    Only a check: croniter expands the field."""

    def value(token: str) -> int:
        lowered = token.lower()
        if lowered in names:
            return names.index(lowered) + (1 if name == "month" else 0)
        if not token.isdigit():
            raise ScheduleError(f"{name} field: {token!r} is not a number")
        number = int(token)
        if not low <= number <= high:
            raise ScheduleError(f"{name} field: {number} is outside {low}-{high}")
        return number

    for part in text.split(","):
        base, _, step_text = part.partition("/")
        if step_text and (not step_text.isdigit() or int(step_text) == 0):
            raise ScheduleError(f"{name} field: step {step_text!r} must be a positive number")
        if base == "*":
            continue
        first, dash, last = base.partition("-")
        start = value(first)
        if dash and start > value(last):
            raise ScheduleError(f"{name} field: range {base!r} runs backwards")


def _walk(expression: str, start: datetime) -> croniter:
    """NCRONTAB's reading in croniter's terms: seconds first, day and weekday both."""
    return croniter(
        expression,
        start,
        day_or=False,
        second_at_beginning=True,
        max_years_between_matches=_HORIZON_YEARS,
    )


@dataclass(frozen=True, slots=True)
class Schedule:
    """One parsed schedule: ``next_after`` is the first occurrence strictly after a time."""

    expression: str
    interval: timedelta | None = None  # a TimeSpan schedule
    zone: tzinfo = UTC

    def next_after(self, after: datetime, anchor: datetime | None = None) -> datetime | None:
        """The next occurrence (aware UTC) strictly after ``after`` (aware). A TimeSpan
        schedule counts from ``anchor`` (its previous occurrence), else from ``after``."""
        if self.interval is not None:
            base = anchor or after
            steps = max(1, int((after - base) / self.interval) + 1) if base <= after else 1
            return (base + steps * self.interval).astimezone(UTC)
        local = after.astimezone(self.zone).replace(tzinfo=None, microsecond=0)
        walk = _walk(self.expression, local)
        try:
            # Ends: each step moves on, and croniter gives up past its horizon.
            while True:
                found: datetime = walk.get_next(datetime)
                aware = found.replace(tzinfo=self.zone)  # fold 0: a repeated time's first
                moment = aware.astimezone(UTC)
                # A local time skipped by a daylight-saving change does not round-trip; in
                # the repeated hour the wall time can lie before ``after``.
                if moment.astimezone(self.zone).replace(tzinfo=None) == found and moment > after:
                    return moment
        except CroniterBadDateError:
            return None

    def shortest_interval(self, now: datetime) -> timedelta | None:
        """The gap between the next two occurrences (for ``useMonitor``'s default)."""
        if self.interval is not None:
            return self.interval
        first = self.next_after(now)
        second = self.next_after(first) if first else None
        return None if first is None or second is None else second - first


def parse(expression: str, zone: tzinfo = UTC, now: datetime | None = None) -> Schedule:
    """Parse a schedule; ``now`` (aware) checks that it ever fires."""
    text = (expression or "").strip()
    span = _TIMESPAN.match(text)
    if span:
        days, hours, minutes, seconds = (int(g or 0) for g in span.groups())
        if hours > 23 or minutes > 59 or seconds > 59:
            raise ScheduleError(f"TimeSpan {text!r}: hours 0-23, minutes and seconds 0-59")
        interval = timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)
        if interval <= timedelta(0):
            raise ScheduleError(f"TimeSpan {text!r} must be longer than zero")
        return Schedule(text, interval=interval, zone=zone)
    parts = text.split()
    if len(parts) != 6:
        raise ScheduleError(
            f"{text!r} is not a schedule: use six NCRONTAB fields"
            " '{second} {minute} {hour} {day} {month} {day-of-week}' or a TimeSpan 'hh:mm:ss'"
        )
    for part, spec in zip(parts, _FIELDS, strict=True):
        _check_field(part, *spec)
    try:
        _walk(text, _PROBE)
    except CroniterError as exc:  # not expected after the checks above; named if it happens
        raise ScheduleError(f"{text!r} is not a schedule: {exc}") from exc
    schedule = Schedule(text, zone=zone)
    if schedule.next_after(now or datetime(2026, 1, 1, tzinfo=UTC)) is None:
        raise ScheduleError(f"{text!r} never occurs")
    return schedule
