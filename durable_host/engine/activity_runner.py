"""The engine's activity side: run work items, bounded, and complete each exactly once.

The engine hands over every activity work item it commits (``fresh``: the commit already
counted it as handed, dequeue count 1, so running it costs no extra store write) and every
one it finds in the store at start or through ``poll`` (claimed with
``mark_activity_dequeued``, whose count above 1 reveals a re-execution after a crash:
``stats['activity_reruns']``). At most ``maxConcurrentActivityFunctions`` run at once; a
fresh item that has to wait for a slot gives its count back first and is claimed when it
starts, so the count is the number of runs that started (queued items that never started
are not re-executions).

A work item whose count passes ``poison_attempts`` does not run again: its task fails with
a reason naming the poison. A finished run's result goes to ``deliver`` (the engine), which
commits it together with the episode it unblocks (``Store.commit_step``); a result the
engine does not take (stopping, or the setting is off) - and any the engine hands back
through ``complete`` - is completed here: ``complete_activity`` removes the work item and
enqueues the result in one atomic step, and does nothing if another run already completed
it: exactly one completion. Claiming and completing are retried until they succeed (or the
host stops), so a passing store error neither strands a claimed item nor loses a result.

Stop: no new run starts; ``stop`` gives running ones until the deadline, then cancels
them, and a run abandoned at stop is released (``release_activity``): it did not crash,
so it must not count towards poison. A sync activity's thread cannot be killed; its late
result is discarded.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from durable_host.core import history as h
from durable_host.core.records import ActivityWork, MessageKind
from durable_host.engine import activities
from durable_host.functions.config import HostConfig
from durable_host.functions.loader import AppIndex
from durable_host.ops import faults, logs, telemetry
from durable_host.store.base import Store

log = logging.getLogger("durable_host.engine")  # the engine's own log: one story per host
T = TypeVar("T")
MAX_STORE_RETRY_DELAY = 30.0  # seconds between retries of a claim or a completion


class ActivityRunner:
    """Runs the activity work items the engine hands over (see module docstring)."""

    def __init__(
        self,
        index: AppIndex,
        store: Store,
        config: HostConfig,
        *,
        now: Callable[[], str],
        notify: Callable[[str], None],
        client_json: Callable[[], str],
        poison_attempts: Callable[[], int],
        stats: dict[str, int],
        deliver: Callable[[ActivityWork, dict[str, Any]], bool] = lambda *_: False,
    ):
        """``notify`` wakes an instance whose activity completed; ``deliver`` offers a
        result to the engine (True: taken); ``client_json`` and ``poison_attempts`` are read
        at each run (the host sets the binding after start)."""
        self.index = index
        self.store = store
        self.config = config
        self.now = now
        self.notify = notify
        self.client_json = client_json
        self.poison_attempts = poison_attempts
        self.stats = stats
        self.deliver = deliver
        self.stopping = False
        self.running: dict[asyncio.Task[None], ActivityWork] = {}
        self._slots = asyncio.Semaphore(max(1, config.max_activities))

    def spawn(self, work: ActivityWork, *, fresh: bool = False) -> None:
        """Run ``work`` in its own task; ``fresh``: created by this engine's own commit."""
        task = asyncio.create_task(self._run(work, fresh))
        self.running[task] = work
        task.add_done_callback(self._forget)

    async def stop(self, deadline: float) -> None:
        """Wait for running activities until ``deadline`` (loop time), then abandon the rest.

        Set ``stopping`` first (the engine does, as soon as it stops): no new run starts.
        """
        if not self.running:
            return
        remaining = max(0.0, deadline - asyncio.get_running_loop().time())
        _, pending = await asyncio.wait(list(self.running), timeout=remaining)
        for task in pending:
            work = self.running.get(task)
            if work is not None:
                log.warning(
                    "activity %s (task %d) abandoned at stop; it runs again after restart",
                    work.name,
                    work.task_id,
                    extra={"instance_id": work.instance_id},
                )
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    def complete(self, work: ActivityWork, message: dict[str, Any]) -> None:
        """Complete a finished run's result in its own transaction, in a task of its own
        (tracked like a run: ``stop`` waits for it)."""
        task = asyncio.create_task(self._complete(work, message))
        self.running[task] = work
        task.add_done_callback(self._forget)

    def _forget(self, task: asyncio.Task[None]) -> None:
        self.running.pop(task, None)

    async def _run(self, work: ActivityWork, fresh: bool = False) -> None:
        logs.instance.set(work.instance_id)  # this task's own context
        if fresh and self._slots.locked():
            # It waits for a slot: if the host dies before it starts, the restart must not
            # count a run that never happened. It is claimed when it starts, as found work is.
            await self._store_call(
                "queueing an activity", lambda: self.store.release_activity(work.work_id)
            )
            fresh = False
        async with self._slots:
            if self.stopping:
                if fresh:
                    await self._release(work)  # never ran: not a crash after restart
                return
            attempts = (
                work.dequeue_count
                if fresh
                else await self._store_call(
                    "claiming an activity",
                    lambda: self.store.mark_activity_dequeued(work.work_id),
                )
            )
            if attempts == 0:
                return  # already completed by an earlier run
            try:
                message = await self._outcome(work, attempts)
            except asyncio.CancelledError:
                await self._release(work)
                raise
        if not self.deliver(work, message):
            await self._complete(work, message)

    async def _complete(self, work: ActivityWork, message: dict[str, Any]) -> None:
        logs.instance.set(work.instance_id)
        completed = await self._store_call(
            "completing an activity",
            lambda: self.store.complete_activity(
                work.work_id, work.instance_id, message, self.now()
            ),
        )
        if completed:
            self.notify(work.instance_id)

    async def _outcome(self, work: ActivityWork, attempts: int) -> dict[str, Any]:
        if attempts > 1:
            self.stats["activity_reruns"] += 1
            log.warning(
                "activity %s (task %d) runs again after an interrupted run", work.name, work.task_id
            )
        if attempts > self.poison_attempts():
            log.error("activity %s (task %d) quarantined as poison", work.name, work.task_id)
            return _poison_message(work, attempts, self.now())
        faults.hit("activity.start")
        self.stats["activity_runs"] += 1
        message = await telemetry.run_activity(  # the activity's span, current while it runs
            self.store,
            work,
            attempts,
            activities.run(
                self.index,
                work,
                client_json=self.client_json,
                app_dir=str(self.config.app_dir),
                timeout=self.config.function_timeout,
                now=self.now,
            ),
        )
        faults.hit("activity.before_complete")
        return message

    async def _store_call(self, what: str, call: Callable[[], Awaitable[T]]) -> T:
        """Retry a store call with back-off until it succeeds or the host stops.

        An activity's bookkeeping must not be lost to a passing store error: the work item
        would stay claimed until a restart, and a finished result would be thrown away.
        """
        delay = 0.5
        while True:
            try:
                return await call()
            except Exception:
                if self.stopping:
                    raise
                log.warning("%s failed; retrying in %.1fs", what, delay, exc_info=True)
                await asyncio.sleep(delay)
                delay = min(MAX_STORE_RETRY_DELAY, delay * 2)

    async def _release(self, work: ActivityWork) -> None:
        """A run abandoned at stop did not crash: it must not count towards poison."""
        try:
            await self.store.release_activity(work.work_id)
        except Exception:  # best effort while stopping
            log.warning("could not release activity %s at stop", work.name, exc_info=True)


def _poison_message(work: ActivityWork, attempts: int, now: str) -> dict[str, Any]:
    reason = (
        f"Activity function '{work.name}' failed: quarantined as poison after {attempts - 1}"
        " interrupted runs (the host died while it ran each time)"
    )
    event = h.task_failed(work.task_id, now, reason, None)
    return {"kind": MessageKind.EVENT, "event": event, "execution_id": work.execution_id}
