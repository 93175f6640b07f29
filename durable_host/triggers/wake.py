"""The wake-up contract: a host that exits when idle says when it must run again.

``describe`` answers "when is the next thing due?" from the store and the timer triggers:
``now`` when work is runnable already (visible messages, activity work items), else the
earliest of the next durable timer or scheduled start (the earliest invisible inbox message)
and the next timer-trigger occurrence. The ``start --exit-when-idle`` host writes it when it
exits, and ``next-wake`` prints it without serving; a waker (systemd timer, Kubernetes
CronJob, cron - ``docs/schedules.md``) starts the host again at ``next_wake``. Nothing is
lost by sleeping: every due time is in the store, so a host started late simply finds the
work due (a timer-trigger occurrence with the monitor on runs once, past due).

With several hosts on one hub (Azure), the store's ``hub_backlog`` answers for the whole
hub, not only for the partitions this host holds, and ``next_due`` is the hub's earliest
timer: the wake time is right whichever host exits last.

``IdleWatch`` decides "idle": nothing queued or running in the engine and no timer function
running, continuously for the configured seconds. Any work restarts the count.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from durable_host.core import history as h
from durable_host.store.base import Store
from durable_host.triggers import timer as timer_triggers

CHECK_EVERY = 0.25  # seconds between idle checks


async def describe(
    store: Store, specs: list[timer_triggers.TimerSpec], now: datetime | None = None
) -> dict[str, Any]:
    moment = now or datetime.now(UTC)
    stamp = h.format_time(moment)
    backlog = getattr(store, "hub_backlog", None)
    if backlog is not None:
        # Several hosts may share the hub: this one's partitions are not all of it.
        found = await backlog(stamp)
        runnable = any(p["backlog"] for p in found["partitions"]) or bool(
            found["activities"]["backlog"]
        )
    else:
        runnable = bool(await store.ready_instances(stamp)) or bool(
            await store.pending_activities()
        )
    durable = await store.next_due(stamp)
    triggers = await timer_triggers.next_occurrences(specs, store, moment)
    candidates = [t for t in (durable, *triggers.values()) if t]
    if runnable:
        candidates.append(stamp)
    return {
        "next_wake": min(candidates, key=h.parse_time) if candidates else None,
        "runnable": runnable,
        "durable_timer": durable,
        "timer_triggers": triggers,
    }


def announce(info: dict[str, Any], wake_file: Path | None) -> None:
    """One JSON line on stdout and, if asked, the same object in ``wake_file`` (atomically)."""
    line = json.dumps({"event": "idle-exit", **info}, sort_keys=True)
    print(line, flush=True)
    if wake_file is not None:
        wake_file = Path(wake_file)
        wake_file.parent.mkdir(parents=True, exist_ok=True)
        partial = wake_file.with_name(wake_file.name + ".tmp")
        partial.write_text(line + "\n")
        partial.replace(wake_file)


def unwritable(wake_file: Path) -> str | None:
    """Why ``announce`` could not write ``wake_file``, asked before the host serves (no side
    effects): a directory there, or a nearest existing ancestor that is no writable directory."""
    wake_file = Path(wake_file).absolute()
    if wake_file.is_dir():
        return f"--wake-file {wake_file} is a directory"
    ancestor = wake_file.parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir() or not os.access(ancestor, os.W_OK | os.X_OK):
        return f"--wake-file {wake_file} cannot be written ({ancestor} is no writable directory)"
    return None


class IdleWatch:
    def __init__(self, seconds: float, busy: Callable[[], bool], on_idle: Callable[[], None]):
        self.seconds = seconds
        self.busy = busy
        self.on_idle = on_idle
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._watch())

    async def _watch(self) -> None:
        loop = asyncio.get_running_loop()
        since = loop.time()
        while True:
            await asyncio.sleep(CHECK_EVERY)
            if self.busy():
                since = loop.time()
            elif loop.time() - since >= self.seconds:
                self.on_idle()
                return

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
