"""Timer-triggered functions, run as the Functions host runs them.

``plan`` reads every ``timerTrigger`` binding at load (``schedule``, ``runOnStartup``,
``useMonitor``; ``%Setting%`` in a schedule names an app setting) and the time zone
(``WEBSITE_TIME_ZONE``), and refuses a bad one with ``TimerConfigError`` naming the function
and the field, so nothing is scheduled from an app that would not run as written.

``TimerTriggers`` runs one loop per timer function. Its status lives in the store (one JSON
text per function, ``Store.get_schedule``): ``Last``, ``Next`` and ``LastUpdated`` as the
Functions schedule monitor keeps them, plus the token of the host that claimed ``Last``.

* **One run per occurrence, whatever the number of hosts.** Before it runs an occurrence, a
  host claims it with a compare-and-swap of the status it read (``swap_schedule``); only the
  winner runs it. A claim is made before the run, so an occurrence whose run is cut off by a
  crash is not repeated (at most once, as a timer's run is a tick, not a work item: work
  that must not be lost belongs in an orchestration the timer starts).
* **Missed occurrences fire once.** With the monitor on, a host that finds ``Next`` in the
  past when it starts (it was stopped, or asleep - ``docs/schedules.md``) runs that
  occurrence once with ``past_due`` true, then continues from the next one after now:
  never once per missed slot. With the monitor off a host starts from the next occurrence.
* ``useMonitor`` defaults as in Functions: on when occurrences are at least a minute apart.
* ``runOnStartup`` runs the function once when the host starts (unclaimed, as in Functions:
  every starting host runs it); a past-due run at start-up stands in for it.
* The function receives a ``func.TimerRequest`` (``past_due``, ``schedule_status``); a
  durable client binding gets the same client JSON as an HTTP function.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from azure.functions.timer import TimerRequest

from durable_host.core import history as h
from durable_host.functions import invocation
from durable_host.functions.loader import AppIndex, AppLoadError, FunctionInfo
from durable_host.store.base import Store
from durable_host.triggers import ncrontab

log = logging.getLogger("durable_host.timers")
MONITOR_THRESHOLD = timedelta(minutes=1)
MAX_SLEEP = 30.0  # seconds: re-check the clock at least this often (it may jump)
MAX_RETRY_DELAY = 30.0


class TimerConfigError(AppLoadError):
    pass


@dataclass(frozen=True, slots=True)
class TimerSpec:
    info: FunctionInfo
    schedule: ncrontab.Schedule
    run_on_startup: bool
    use_monitor: bool

    @property
    def name(self) -> str:
        return self.info.name


def _flag(binding: dict[str, Any], key: str, default: bool, function: str) -> bool:
    value = binding.get(key)
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise TimerConfigError(
        f"timer function '{function}': {key} must be true or false, not {value!r}"
    )


def plan(index: AppIndex, environ: Mapping[str, str], now: datetime) -> list[TimerSpec]:
    """Every enabled timer function of the app, checked; ``TimerConfigError`` otherwise."""
    if not index.timers:
        return []
    try:
        zone = ncrontab.time_zone(environ.get("WEBSITE_TIME_ZONE"))
    except ncrontab.ScheduleError as exc:
        raise TimerConfigError(f"setting WEBSITE_TIME_ZONE: {exc}") from exc
    specs = []
    for info in index.timers:
        binding = info.trigger()
        text = str(binding.get("schedule") or "")
        if text.startswith("%") and text.endswith("%") and len(text) > 2:
            setting = text[1:-1]
            if not environ.get(setting):
                raise TimerConfigError(
                    f"timer function '{info.name}': schedule names the setting {setting!r},"
                    " which is not set"
                )
            text = environ[setting]
        try:
            schedule = ncrontab.parse(text, zone, now)
        except ncrontab.ScheduleError as exc:
            raise TimerConfigError(f"timer function '{info.name}': schedule: {exc}") from exc
        gap = schedule.shortest_interval(now)
        monitor_default = gap is not None and gap >= MONITOR_THRESHOLD
        spec = TimerSpec(
            info,
            schedule,
            _flag(binding, "runOnStartup", False, info.name),
            _flag(binding, "useMonitor", monitor_default, info.name),
        )
        if not info.disabled:
            specs.append(spec)
    return specs


# --- status (pure) ---------------------------------------------------------------------


def read_status(raw: str | None) -> dict[str, Any]:
    if not raw:
        return {}
    try:
        found = json.loads(raw)
    except ValueError:
        return {}  # an unreadable status is treated as none: the schedule starts afresh
    return found if isinstance(found, dict) else {}


def _time(status: dict[str, Any], key: str) -> datetime | None:
    value = status.get(key)
    try:
        return h.parse_time(value).astimezone(UTC) if isinstance(value, str) else None
    except ValueError:
        return None


def upcoming(spec: TimerSpec, status: dict[str, Any], now: datetime) -> datetime | None:
    """The occurrence a host should wait for next, given the stored status."""
    recorded = _time(status, "Next")
    if spec.use_monitor and recorded is not None and recorded <= now:
        return recorded  # missed while no host ran: due now, once
    anchor = _time(status, "Last") if spec.schedule.interval is not None else None
    found = spec.schedule.next_after(now, anchor)
    if recorded is not None and found is not None and now < recorded < found:
        return recorded  # written by a host that planned from an earlier clock
    return found


def status_text(last: datetime | None, next_: datetime | None, now: datetime, claim: str) -> str:
    def fmt(t: datetime | None) -> str | None:
        return None if t is None else h.format_time(t)

    return json.dumps(
        {"Last": fmt(last), "Next": fmt(next_), "LastUpdated": fmt(now), "Claim": claim},
        sort_keys=True,
    )


def public_status(status: dict[str, Any]) -> dict[str, Any]:
    """What ``TimerRequest.schedule_status`` shows (the Functions shape)."""
    return {k: status.get(k) for k in ("Last", "Next", "LastUpdated")}


async def next_occurrences(specs: list[TimerSpec], store: Store, now: datetime) -> dict[str, str]:
    """Each timer function's next occurrence by the stored status (for ``next-wake``)."""
    out = {}
    for spec in specs:
        found = upcoming(spec, read_status(await store.get_schedule(spec.name)), now)
        if found is not None:
            out[spec.name] = h.format_time(max(found, now))
    return out


# --- the runner (IO) ---------------------------------------------------------------------


class TimerTriggers:
    def __init__(
        self,
        specs: list[TimerSpec],
        store: Store,
        client_json: Callable[[], str],
        app_dir: str,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.specs = specs
        self.store = store
        self.client_json = client_json
        self.app_dir = app_dir
        self.clock = clock
        self.token = uuid.uuid4().hex  # this host's claims
        self.running = 0  # invocations in flight (the idle watch reads it)
        self.next: dict[str, datetime] = {}
        self.stats = {"timer_runs": 0, "timer_skipped": 0}
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._loop(spec)) for spec in self.specs]
        for spec in self.specs:
            log.info(
                "timer function %s: schedule %r%s%s",
                spec.name,
                spec.schedule.expression,
                ", monitor on" if spec.use_monitor else "",
                ", runs on startup" if spec.run_on_startup else "",
            )

    async def stop(self) -> None:
        self._stop.set()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def next_wake(self) -> dict[str, str]:
        return {name: h.format_time(t) for name, t in self.next.items()}

    async def _loop(self, spec: TimerSpec) -> None:
        first, failures = True, 0
        while not self._stop.is_set():
            try:
                await self._step(spec, first)
                first, failures = False, 0
            except asyncio.CancelledError:
                raise
            except Exception:  # a store outage must not end the schedule
                failures += 1
                delay = min(MAX_RETRY_DELAY, 0.5 * 2**failures)
                log.warning(
                    "timer %s: store failed; retrying in %.1fs", spec.name, delay, exc_info=True
                )
                await self._sleep(delay)

    async def _step(self, spec: TimerSpec, first: bool) -> None:
        raw = await self.store.get_schedule(spec.name)
        status, now = read_status(raw), self.clock()
        due = upcoming(spec, status, now)
        if first and due is not None and due <= now:
            await self._claim_and_run(spec, raw, status, due, past_due=True)
            return
        if first and spec.run_on_startup:
            await self._invoke(spec, status, past_due=False)
        if due is None:
            self.next.pop(spec.name, None)
            await self._sleep(MAX_SLEEP)
            return
        if _time(status, "Next") != due:
            # Record the plan first: a host that stops now and starts later finds it missed.
            text = status_text(_time(status, "Last"), due, now, str(status.get("Claim", "")))
            await self.store.swap_schedule(spec.name, raw, text)
            return  # re-read: another host may have written meanwhile
        self.next[spec.name] = due
        while (wait := (due - self.clock()).total_seconds()) > 0:
            if await self._sleep(min(wait, MAX_SLEEP)):
                return
        await self._claim_and_run(spec, raw, status, due, past_due=False)

    async def _claim_and_run(
        self,
        spec: TimerSpec,
        raw: str | None,
        status: dict[str, Any],
        due: datetime,
        past_due: bool,
    ) -> None:
        now = self.clock()
        following = spec.schedule.next_after(max(now, due), due)
        claim = f"{self.token}:{h.format_time(due)}"
        text = status_text(due, following, now, claim)
        won = await self.store.swap_schedule(spec.name, raw, text)
        if not won:
            # A lost response may hide our own write: the stored claim tells.
            won = read_status(await self.store.get_schedule(spec.name)).get("Claim") == claim
        if not won:
            self.stats["timer_skipped"] += 1
            log.info("timer %s: occurrence %s ran on another host", spec.name, h.format_time(due))
            return
        await self._invoke(spec, read_status(text), past_due)

    async def _invoke(self, spec: TimerSpec, status: dict[str, Any], past_due: bool) -> None:
        request = TimerRequest(
            past_due=past_due,
            schedule_status=public_status(status),
            schedule={"AdjustForDST": True},
        )
        kwargs = invocation.build_kwargs(spec.info, request, self.client_json, self.app_dir)
        self.running += 1
        try:
            await invocation.call(spec.info.fn, kwargs)
            self.stats["timer_runs"] += 1
        except Exception:
            log.exception("timer function %s failed", spec.name)
        finally:
            self.running -= 1

    async def _sleep(self, seconds: float) -> bool:
        """Sleep; True when the host is stopping."""
        try:
            await asyncio.wait_for(self._stop.wait(), timeout=max(0.0, seconds))
        except TimeoutError:
            return False
        return True


def environ() -> Mapping[str, str]:
    return os.environ
