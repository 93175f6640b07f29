"""The imperative shell: the one place where decisions meet IO.

Instances with visible inbox messages are *ready*; a bounded set of workers takes a
ready instance, reads its messages and history, runs one pure episode (or entity batch)
in a worker thread, commits the result in one store transaction, and only then
dispatches what the commit produced: activity work items to the activity runners,
messages to other instances (which become ready), timers to the timer loop.

Nothing is kept in memory for a waiting instance: the ready set holds ids only, and
the timer loop holds one due time - the earliest invisible message in the store - so
ten thousand sleeping instances cost what one costs. After a crash, ``start`` finds
every instance with visible messages and every uncompleted activity in the store and
picks them up: an activity that was running when the host died runs again (the one
re-execution window, counted in ``stats['activity_reruns']``).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from durable_host import activities, entity, faults, orchestration
from durable_host import history as h
from durable_host.config import HostConfig
from durable_host.loader import AppIndex
from durable_host.store.base import ActivityWork, Store

log = logging.getLogger("durable_host.engine")
MAX_ACTIVITY_ATTEMPTS = 5  # dequeues before an activity is declared poison
MAX_IDLE_WAIT = 30.0  # seconds; the timer loop re-checks the store at least this often


def utc_now() -> str:
    return h.format_time(datetime.now(UTC))


class Engine:
    def __init__(
        self,
        index: AppIndex,
        store: Store,
        config: HostConfig,
        *,
        client_json: Callable[[], str] = lambda: "{}",
        clock: Callable[[], str] = utc_now,
    ):
        self.index = index
        self.store = store
        self.config = config
        self.client_json = client_json
        self.now = clock
        self._ready: asyncio.Queue[str] = asyncio.Queue()
        self._queued: set[str] = set()
        self._running: set[str] = set()
        self._dirty: set[str] = set()
        self._wake = asyncio.Event()
        self._activity_slots = asyncio.Semaphore(max(1, config.max_activities))
        self._workers: list[asyncio.Task[None]] = []
        self._activities: set[asyncio.Task[None]] = set()
        self._stopping = False
        self._idle = asyncio.Event()
        self.stats: dict[str, int] = {"episodes": 0, "activity_runs": 0, "activity_reruns": 0}
        # Recent durations (seconds) for /admin/host/metrics and bench/: bounded memory.
        self.timings: dict[str, deque[float]] = {
            name: deque(maxlen=10_000) for name in ("replay", "commit", "episode", "entity_batch")
        }

    # --- lifecycle ----------------------------------------------------------------

    async def start(self) -> None:
        now = self.now()
        for instance_id in await self.store.ready_instances(now):
            self.notify(instance_id)
        for work in await self.store.pending_activities():
            self._spawn_activity(work)
        workers = max(1, self.config.max_orchestrators)
        self._workers = [asyncio.create_task(self._worker()) for _ in range(workers)]
        self._workers.append(asyncio.create_task(self._timer_loop()))

    async def stop(self, grace: float = 10.0) -> None:
        """Stop taking work; give running activities ``grace`` seconds, then abandon them.

        An abandoned activity's work item stays in the store and runs again after restart.
        """
        self._stopping = True
        for task in self._workers:
            task.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        if self._activities:
            _, pending = await asyncio.wait(self._activities, timeout=grace)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

    def notify(self, instance_id: str) -> None:
        """Mark an instance ready (it has, or may have, visible messages)."""
        if self._stopping:
            return
        if instance_id in self._running:
            self._dirty.add(instance_id)
        elif instance_id not in self._queued:
            self._queued.add(instance_id)
            self._ready.put_nowait(instance_id)

    def wake_timers(self) -> None:
        self._wake.set()

    # --- orchestrations and entities ----------------------------------------------

    async def _worker(self) -> None:
        while True:
            instance_id = await self._ready.get()
            self._queued.discard(instance_id)
            self._running.add(instance_id)
            try:
                await self._process(instance_id)
            except Exception:
                log.exception("episode failed for instance %s; it will be retried", instance_id)
                await asyncio.sleep(1.0)
                self._dirty.add(instance_id)
            finally:
                self._running.discard(instance_id)
                if instance_id in self._dirty:
                    self._dirty.discard(instance_id)
                    self.notify(instance_id)

    async def _process(self, instance_id: str) -> None:
        now = self.now()
        limit = 1000
        messages = await self.store.fetch_messages(instance_id, now, limit)
        if not messages:
            return
        if instance_id.startswith("@"):
            await self._entity_batch(instance_id, messages, now)
        else:
            await self._episode(instance_id, messages, now)
        if len(messages) >= limit:
            self._dirty.add(instance_id)

    async def _episode(
        self, instance_id: str, messages: list[tuple[int, dict[str, Any]]], now: str
    ) -> None:
        record = await self.store.get_instance(instance_id)
        history = await self.store.get_history(instance_id)
        starts = [m for _, m in messages if m["kind"] == "start"]
        name = starts[-1]["event"]["Name"] if starts else (record.name if record else "")
        info = self.index.orchestrator(name)
        handle = info.fn if info is not None and not info.disabled else None
        view = orchestration.InstanceView(
            instance_id,
            record.status if record else None,
            record.execution_id if record else None,
            history,
            record.name if record else name,
        )
        started = time.perf_counter()
        episode = await asyncio.to_thread(
            orchestration.run_episode, handle, view, messages, now, uuid.uuid4().hex
        )
        replayed = time.perf_counter()
        if not episode.consumed:
            return  # everything is held (suspended): nothing to commit
        faults.hit("episode.before_commit")
        created = await self.store.commit_episode(instance_id, episode, now)
        faults.hit("episode.after_commit")
        done = time.perf_counter()
        self.timings["replay"].append(replayed - started)
        self.timings["commit"].append(done - replayed)
        self.timings["episode"].append(done - started)
        self.stats["episodes"] += 1
        if episode.status and episode.status != (record.status if record else None):
            log.info("instance %s is %s", instance_id, episode.status)
        for work in created:
            self._spawn_activity(work)
        self._dispatch(episode.outbox, now)

    def _dispatch(self, outbox: list[orchestration.Outgoing], now: str) -> None:
        for item in outbox:
            if item.kind != "message":
                continue
            if item.visible_at is not None and item.visible_at > now:
                self.wake_timers()
            else:
                self.notify(item.target)

    def metrics(self) -> dict[str, Any]:
        """Counters and p50/p99 of recent durations, in milliseconds."""
        summary: dict[str, Any] = dict(self.stats)
        for name, values in self.timings.items():
            ordered = sorted(values)
            if ordered:
                summary[f"{name}_ms"] = {
                    "count": len(ordered),
                    "p50": round(ordered[len(ordered) // 2] * 1000, 3),
                    "p99": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000, 3),
                }
        summary["ready"] = len(self._queued)
        summary["running_activities"] = len(self._activities)
        return summary

    async def _entity_batch(
        self, instance_id: str, messages: list[tuple[int, dict[str, Any]]], now: str
    ) -> None:
        started = time.perf_counter()
        record = await self.store.get_instance(instance_id)
        name = instance_id[1:].partition("@")[0]
        info = self.index.entity(name)
        handle = info.fn if info is not None and not info.disabled else None
        commit = await asyncio.to_thread(
            entity.run_batch,
            handle,
            instance_id,
            bool(record and record.entity_exists),
            record.entity_state if record else None,
            messages,
            now,
        )
        faults.hit("entity.before_commit")
        await self.store.commit_entity(commit)
        faults.hit("entity.after_commit")
        self.stats["entity_batches"] = self.stats.get("entity_batches", 0) + 1
        self.stats["entity_operations"] = self.stats.get("entity_operations", 0) + len(messages)
        self.timings["entity_batch"].append(time.perf_counter() - started)
        for target, _ in commit.responses:
            self.notify(target)

    # --- timers -------------------------------------------------------------------

    async def _timer_loop(self) -> None:
        while True:
            self._wake.clear()
            now = self.now()
            for instance_id in await self.store.ready_instances(now, due_only=True):
                self.notify(instance_id)
            due = await self.store.next_due(now)
            wait = MAX_IDLE_WAIT
            if due is not None:
                delta = (h.parse_time(due) - h.parse_time(self.now())).total_seconds()
                wait = min(wait, max(delta, 0.0) + 0.001)
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=wait)
            except TimeoutError:
                pass

    # --- activities ---------------------------------------------------------------

    def _spawn_activity(self, work: ActivityWork) -> None:
        task = asyncio.create_task(self._run_activity(work))
        self._activities.add(task)
        task.add_done_callback(self._activities.discard)

    async def _run_activity(self, work: ActivityWork) -> None:
        async with self._activity_slots:
            if self._stopping:
                return
            attempts = await self.store.mark_activity_dequeued(work.work_id)
            if attempts == 0:
                return  # already completed by an earlier run
            if attempts > 1:
                self.stats["activity_reruns"] += 1
                log.warning(
                    "activity %s (instance %s, task %d) runs again after an interrupted run",
                    work.name, work.instance_id, work.task_id,
                )
            if attempts > MAX_ACTIVITY_ATTEMPTS:
                message = _poison_message(work, attempts, self.now())
            else:
                faults.hit("activity.start")
                self.stats["activity_runs"] += 1
                message = await activities.run(
                    self.index,
                    work,
                    client_json=self.client_json,
                    app_dir=str(self.config.app_dir),
                    timeout=self.config.function_timeout,
                    now=self.now,
                )
                faults.hit("activity.before_complete")
            if await self.store.complete_activity(
                work.work_id, work.instance_id, message, self.now()
            ):
                self.notify(work.instance_id)


def _poison_message(work: ActivityWork, attempts: int, now: str) -> dict[str, Any]:
    reason = (
        f"Activity function '{work.name}' failed: quarantined as poison after {attempts - 1}"
        " interrupted runs (the host died while it ran each time)"
    )
    event = h.task_failed(work.task_id, now, reason, None)
    return {"kind": "event", "event": event, "execution_id": work.execution_id}
