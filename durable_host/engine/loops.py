"""The imperative shell: the one place where decisions meet IO.

Instances with visible inbox messages are *ready* (``ready.py``); a bounded set of workers
takes a ready instance and runs one episode (or entity batch) of it top to bottom
(``episodes.py``): read its messages and record, count the attempt (``attempts.py``), decide
in a pure core, commit the result in one store transaction, and only then dispatch what the
commit produced: activity work items to the activity runner (``activity_runner.py``),
messages to other instances (which become ready), timers to the timer loop. The settings
come from ``settings.py``. This module is the shell around them: the workers, their
back-off, the timer and poll loops, start and stop, and the metrics.

The engine is one object, ``Engine``, built in layers, each a base class of the next in its
own module - the ready set, the attempts, the episodes, and this shell - so each concept
reads in one place while the state of one engine stays one object's. A layer uses only
what it or a layer below it defines, and names (annotates) the settings the shell sets.

Nothing is kept in memory for a waiting instance: the ready set holds ids only, and the
timer loop holds one due time - the earliest invisible message in the store - so ten
thousand sleeping instances cost what one costs.

After a crash, ``start`` finds every instance with visible messages and every uncompleted
activity in the store and picks them up: an activity that was running when the host died,
or had returned but its result was not yet committed, runs again (the one re-execution
window, counted in ``stats['activity_reruns']``). Work another process writes to the task
hub arrives through the store's ``poll``, which the engine calls in a loop from start to
stop. Failed attempts are retried with exponential back-off (at most 30 s), so a poison
instance costs no CPU while it waits; activities have the same poison bound as
orchestrations and entities (``attempts.py``) through their dequeue count.

Stop (SIGTERM): no new work is taken; running episodes finish their commit; running
activities get ``grace`` seconds, and an abandoned one is released to run again after
restart (a sync activity's thread cannot be killed: it is left running, its late result
discarded, and the process exits without waiting for it).
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from durable_host.core import history as h
from durable_host.core import replay
from durable_host.engine.activity_runner import ActivityRunner
from durable_host.engine.episodes import Episodes
from durable_host.engine.settings import (
    INLINE_EVENTS,
    MAX_ACTIVITY_ATTEMPTS,
    env_flag,
    env_int,
    history_cache,
    session_verify,
)
from durable_host.functions import sdk_codec
from durable_host.functions.config import HostConfig
from durable_host.functions.loader import AppIndex
from durable_host.ops import logs
from durable_host.store.base import Store, StoreError, UnitLostError

__all__ = ["INLINE_EVENTS", "MAX_ACTIVITY_ATTEMPTS", "Engine", "utc_now"]

log = logging.getLogger("durable_host.engine")
MAX_IDLE_WAIT = 30.0  # seconds; the timer loop re-checks the store at least this often
MAX_RETRY_DELAY = 30.0  # seconds between attempts at an instance whose processing fails


def utc_now() -> str:
    """The time as ``history.format_time`` writes it. The engine asks several times per step:
    the date and time of day are formatted once per second, only the microseconds each time
    (``strftime`` of a ``datetime`` was a few per cent of a chain step's CPU)."""
    global _formatted_second
    seconds, micros = divmod(time.time_ns() // 1000, 1_000_000)
    second, text = _formatted_second  # one tuple: a thread never sees half of an update
    if second != seconds:
        text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
        _formatted_second = (seconds, text)
    return f"{text}.{micros:06d}Z"


_formatted_second: tuple[int, str] = (-1, "")


class Engine(Episodes):
    """The engine of one host process: its layers (module docstring) and the shell's loops."""

    def __init__(
        self,
        index: AppIndex,
        store: Store,
        config: HostConfig,
        *,
        client_json: Callable[[], str] = lambda: "{}",
        clock: Callable[[], str] = utc_now,
        fast_replay: bool | None = None,
        poison_attempts: int | None = None,
    ):
        super().__init__()
        self.index = index
        self.store = store
        self.config = config
        self.client_json = client_json
        self.now = clock
        # Settings a deployment rarely changes come from the environment, like the
        # fault plan (settings.py).
        self.fast_replay = (
            env_flag("DURABLE_HOST_FAST_REPLAY", True) if fast_replay is None else fast_replay
        )
        self.poison_attempts = poison_attempts or env_int(
            "DURABLE_HOST_POISON_ATTEMPTS", MAX_ACTIVITY_ATTEMPTS
        )
        self.cache = history_cache(self.fast_replay)
        # On unless host.json's extendedSessionsEnabled is false; DURABLE_HOST_SESSIONS
        # overrides. A session checks determinism when it is rebuilt, or every Nth episode.
        self.sessions = self.fast_replay and env_flag(
            "DURABLE_HOST_SESSIONS", config.extended_sessions
        )
        # DURABLE_HOST_SESSION_VERIFY: which episodes of a session replay in full anyway.
        self.session_verify = session_verify()
        # DURABLE_HOST_INLINE_EVENTS: an episode whose stored history has fewer events runs
        # on the event loop instead of a worker thread (0: every episode in a thread).
        self.inline_events = env_int("DURABLE_HOST_INLINE_EVENTS", INLINE_EVENTS)
        # One commit per step (DURABLE_HOST_STEP_COMMIT=0 turns it off, for comparisons):
        # an activity's result is committed with the episode it unblocks, and a commit (or
        # a start) counts the next episode's attempt in advance.
        self.step_commits = env_flag("DURABLE_HOST_STEP_COMMIT", True)
        self._failures: dict[str, int] = {}  # instances whose processing failed, in a row
        self._orchestrator_slots = asyncio.Semaphore(max(1, config.max_orchestrators))
        self._entity_slots = asyncio.Semaphore(max(1, config.max_entities))
        self._workers: list[asyncio.Task[None]] = []
        self.stats: dict[str, int] = {"episodes": 0, "activity_runs": 0, "activity_reruns": 0}
        self.activities = ActivityRunner(
            index,
            store,
            config,
            now=lambda: self.now(),
            notify=self.notify,
            client_json=lambda: self.client_json(),
            poison_attempts=lambda: self.poison_attempts,
            stats=self.stats,
            deliver=self.deliver,
        )
        # Recent durations (seconds) for /admin/host/metrics and bench/: bounded memory.
        self.timings: dict[str, deque[float]] = {
            name: deque(maxlen=10_000)
            for name in (
                "attempt",
                "load",
                "replay",
                "commit",
                "episode",
                "entity_batch",
                "wake",
            )
        }

    # --- lifecycle ----------------------------------------------------------------

    async def start(self) -> None:
        if self.fast_replay != replay.install(self.fast_replay):
            log.warning("fast timestamp parsing is off: dateutil disagrees on this machine")
        sdk_codec.install(self.fast_replay)
        now = self.now()
        for instance_id in await self.store.ready_instances(now):
            self.rediscover(instance_id)
        for work in await self.store.pending_activities():
            self.activities.spawn(work)
        workers = max(1, self.config.max_orchestrators) + max(1, self.config.max_entities)
        self._workers = [asyncio.create_task(self._worker()) for _ in range(workers)]
        self._workers.append(asyncio.create_task(self._timer_loop()))
        self._workers.append(asyncio.create_task(self._poll_loop()))

    async def stop(self, grace: float = 10.0) -> None:
        """Take no new work; let running episodes commit and activities finish, within ``grace``.

        An abandoned activity's work item stays in the store and runs again after restart.
        """
        self._stopping = self.activities.stopping = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, grace)
        log.info(
            "stopping: %d episodes and %d activities running, %.1fs grace",
            len(self._running),
            len(self.activities.running),
            grace,
        )
        while self._running and loop.time() < deadline:
            await asyncio.sleep(0.02)  # episodes are short; a commit must not be cut off
        for task in self._workers:
            task.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        for instance_id in list(self._results):
            self._complete_apart(self._results.pop(instance_id))  # within the same grace
        await self._release_counted(deadline)
        await self.activities.stop(deadline)

    def busy(self) -> bool:
        """Whether anything is queued or running (``wake.IdleWatch`` reads it)."""
        return bool(self._queued or self._running or self._results or self.activities.running)

    # --- the workers ----------------------------------------------------------------

    async def _worker(self) -> None:
        while True:
            instance_id = await self._ready.get()
            self._queued.discard(instance_id)
            if self._stopping:
                continue  # stopping: what is queued stays in the store for the next start
            self._running.add(instance_id)
            token = logs.instance.set(instance_id)
            try:
                await self._process(instance_id)
                self._failures.pop(instance_id, None)
            except UnitLostError as exc:
                self._dirty.discard(instance_id)
                self._drop(instance_id, exc)
            except Exception:  # noqa: BLE001 - logged and retried with back-off, never lost
                self._dirty.discard(instance_id)
                self._retry_later(instance_id)
            finally:
                logs.instance.reset(token)
                self._running.discard(instance_id)
                if instance_id in self._dirty:
                    self._dirty.discard(instance_id)
                    self._ready_up(instance_id)

    def _drop(self, instance_id: str, why: UnitLostError) -> None:
        """Another host owns the instance's partition (a store several hosts share):
        nothing was written; its owner runs it. Results this host holds are stored for it."""
        log.info("instance left to the owner of its partition: %s", why)
        self.lost_to_takeover(instance_id)
        self._failures.pop(instance_id, None)
        self._forget(instance_id)
        self._complete_apart(self._results.pop(instance_id, []))

    def _retry_later(self, instance_id: str) -> None:
        """Back off exponentially: a failing instance must not spin (attempts are counted)."""
        failures = self._failures.get(instance_id, 0) + 1
        self._failures[instance_id] = failures
        delay = min(MAX_RETRY_DELAY, 0.25 * 2 ** min(failures, 8))
        error = sys.exc_info()[1]
        if isinstance(error, StoreError):
            log.error(
                "storage failed (%d in a row; not counted as an attempt); retrying in %.1fs: %s",
                failures,
                delay,
                error,
            )
        else:
            log.exception("processing failed (%d in a row); retrying in %.1fs", failures, delay)
        self._forget(instance_id)
        # Results must not wait in memory through the back-off: they are stored now.
        self._complete_apart(self._results.pop(instance_id, []))
        asyncio.get_running_loop().call_later(delay, self.notify, instance_id)

    def metrics(self) -> dict[str, Any]:
        """Counters and p50/p99 of recent durations, in milliseconds."""
        summary: dict[str, Any] = dict(self.stats)
        for name, values in self.timings.items():
            ordered = sorted(values)
            if ordered:
                summary[f"{name}_ms"] = {
                    "count": len(ordered),
                    "p50": round(ordered[len(ordered) // 2] * 1000, 3),
                    "p99": round(
                        ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000, 3
                    ),
                }
        summary["ready"] = len(self._queued)
        summary["parked_for_version"] = len(self.parking)
        summary["running_activities"] = len(self.activities.running)
        if self.cache is not None:
            summary["history_cache"] = {
                "instances": len(self.cache),
                "events": self.cache.size,
                "hits": self.cache.hits,
                "misses": self.cache.misses,
            }
            summary["sdk_sessions"] = self.sessions
        if self.store.round_trips is not None:
            summary["store_round_trips"] = self.store.round_trips
        return summary

    def set_fast_replay(self, on: bool, with_sessions: bool = True) -> None:
        """Switch the replay optimisations (``replay``, ``sessions``) on or off, for bench/."""
        self.fast_replay = on
        self.sessions = on and with_sessions
        self.cache = history_cache(on)
        replay.install(on)
        sdk_codec.install(on)

    # --- timers -------------------------------------------------------------------

    async def _timer_loop(self) -> None:
        failures = 0
        while True:
            self._wake.clear()
            try:
                wait = await self._fire_due_timers()
                failures = 0
            except Exception as exc:  # noqa: BLE001 - logged in a line, retried
                # A store outage must not end the loop: timers would never fire again. One
                # line per failure (no traceback): an outage of minutes is not a page of them.
                failures += 1
                wait = min(MAX_IDLE_WAIT, 0.5 * 2**failures)
                log.warning("timer scan failed; retrying in %.1fs: %s", wait, logs.one_line(exc))
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=wait)
            except TimeoutError:
                pass

    async def _fire_due_timers(self) -> float:
        """Notify instances with due timers; return how long to sleep until the next one."""
        now = self.now()
        for instance_id in await self.store.ready_instances(now, due_only=True):
            self.rediscover(instance_id)
        due = await self.store.next_due(now)
        if due is None:
            return MAX_IDLE_WAIT
        delta = (h.parse_time(due) - h.parse_time(self.now())).total_seconds()
        return min(MAX_IDLE_WAIT, max(delta, 0.0) + 0.001)

    async def _poll_loop(self) -> None:
        """Take up work this process was not notified of; ``poll`` paces itself (back-off).

        A store reports parked instances again and again (their messages stay visible, so
        its own pacing stays quick): when a poll brings nothing but parked instances, the
        loop backs off by itself, up to ``MAX_IDLE_WAIT``.
        """
        idle = 0.0
        while True:
            instance_ids, works = await self.store.poll()
            fresh = [i for i in instance_ids if not self.parking.skips(i, time.monotonic())]
            for instance_id in fresh:
                self.notify(instance_id)
            for work in works:
                self.activities.spawn(work)
            if instance_ids and not fresh and not works:
                idle = min(MAX_IDLE_WAIT, max(0.5, idle * 2))
                await asyncio.sleep(idle)
            else:
                idle = 0.0
