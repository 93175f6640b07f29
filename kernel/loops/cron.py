"""Cron schedules of agent loops: six-field NCRONTAB or a TimeSpan, in a time zone. Pure.

The same grammar and rules as the timer triggers of Azure Functions, from the one parser the
app and the durable host share (``functions_schedules``: the app never imports its host).
A cron is read in local wall time of its IANA time zone: a skipped local time is skipped, a
repeated one fires once. A schedule that never fires within five years is refused
(``ScheduleError``).
"""

from __future__ import annotations

from functions_schedules import Schedule, ScheduleError, parse, time_zone

__all__ = ["Schedule", "ScheduleError", "parse", "time_zone"]
