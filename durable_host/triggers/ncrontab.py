"""Timer-trigger schedules as the Functions host reads them: the shared parser.

Six-field NCRONTAB or a ``TimeSpan``, in the time zone of ``WEBSITE_TIME_ZONE``; the
grammar, the time-zone rules and the errors are ``functions_schedules``' (one parser for the
host and the app, which may not import each other). This module keeps the name the host's
timer triggers and dashboard use.
"""

from __future__ import annotations

from functions_schedules import Schedule, ScheduleError, parse, time_zone

__all__ = ["Schedule", "ScheduleError", "parse", "time_zone"]
