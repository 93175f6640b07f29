"""The imperative shell: the one place where decisions meet IO.

Instances with visible inbox messages are *ready*; a bounded set of workers takes a
ready instance, reads its messages and history, runs one pure episode (or entity batch)
in a worker thread, commits the result in one store transaction, and only then
dispatches what the commit produced: activity work items to the activity runner
(``activity_runner.py``), messages to other instances (which become ready), timers to
the timer loop.

Nothing is kept in memory for a waiting instance: the ready set holds ids only, and
the timer loop holds one due time - the earliest invisible message in the store - so
ten thousand sleeping instances cost what one costs. The replay cache
(``replay.HistoryCache``) holds the histories - and, unless they are turned off, the
live SDK sessions (``sessions.py``) - of *hot* instances only, those with an activity or
message on its way, and drops an instance as soon as it waits, finishes, or a commit of it
fails.

One commit per step: an activity that ran here hands its result to the engine
(``deliver``) instead of completing it; the instance's next episode takes it as an
in-memory message, and ``Store.commit_step`` commits the result and the episode in one
transaction - the result is durable before anything the episode does is released. Results
that arrive while the instance's episode runs wait for the next episode, which takes them
all (a fan-in becomes a few episodes). A result no episode commits (the instance is
suspended or parked, the episode failed, another run reported it first, the host stops) is
completed by itself (``complete_activity``), as every result was before.

After a crash, ``start`` finds every instance with visible messages and every
uncompleted activity in the store and picks them up: an activity that was running when
the host died, or had returned but its result was not yet committed, runs again (the one
re-execution window, counted in ``stats['activity_reruns']``). Work another process writes
to the task hub arrives through the store's ``poll``, which the engine calls in a loop from
start to stop.

Poison: before each episode or entity batch the store counts one more attempt
(``begin_attempt``; a commit resets it). A commit that schedules an activity of the
instance counts its next attempt (the step) in advance, in its own transaction
(``count_next``; not with ``poison_attempts`` 1), and the engine runs the next episode
without a write of its own; so does a start on a store that can (``count_first``), whose
first episode then also takes the start message from memory (``started``). A run that
dies is counted all the same, and a graceful stop gives back the advance counts it did
not use. (A crash while no episode of the instance ran - in its activity, or before its
first episode - leaves that advance count standing, so it adds one attempt at most, once
per commit or start.) Work that kills the process every time, or fails every time,
reaches ``poison_attempts`` and is quarantined. A failure of the
storage itself (``StoreError``: a full disk, an outage) is not the work's fault: the
attempt it ended does not count - the next attempt reuses its count instead of counting
again - so a store that recovers never turns into quarantined instances. Quarantined: the orchestration
fails (or each entity operation fails) with a reason naming the poison, its messages
are consumed, and nothing runs it again. Activities have the same bound through their
dequeue count. An inbox message or history row that cannot be decoded fails its
instance at once. Failed attempts are retried with exponential back-off (at most 30 s),
so a poison instance costs no CPU while it waits.

Versions (``versioning.py``): before an episode the engine checks the instance's version
against this host's policy, before counting an attempt. A version it must not run is, with
``Reject``, *parked*: nothing is read further, consumed, counted or written, the instance's
status shows why (``versioning.Parking``, ``DurableClient.status``), and scans that find its
waiting messages again do not take it for ``Parking.RECHECK_SECONDS``; a message written
through this host takes it at once. With ``Fail`` the episode fails the instance instead
of running its code.

Stop (SIGTERM): no new work is taken; running episodes finish their commit; running
activities get ``grace`` seconds, and an abandoned one is released to run again after
restart (a sync activity's thread cannot be killed: it is left running, its late result
discarded, and the process exits without waiting for it).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import logging
import os
import sys
import time
import uuid
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from durable_host import (
    entity,
    faults,
    logs,
    orchestration,
    replay,
    sdk_codec,
    sessions,
    telemetry,
    versioning,
)
from durable_host import history as h
from durable_host.activity_runner import ActivityRunner
from durable_host.config import ConfigError, HostConfig
from durable_host.loader import AppIndex
from durable_host.records import (
    ActivityWork,
    Completion,
    InstanceRecord,
    MessageKind,
    OutgoingKind,
    RuntimeStatus,
)
from durable_host.store.base import CorruptHistoryError, Store, StoreError

log = logging.getLogger("durable_host.engine")
MAX_ACTIVITY_ATTEMPTS = 5  # default attempts before work is declared poison
MAX_IDLE_WAIT = 30.0  # seconds; the timer loop re-checks the store at least this often
MESSAGE_BATCH = 1000  # inbox messages taken into one episode
MAX_RETRY_DELAY = 30.0  # seconds between attempts at an instance whose processing fails
INLINE_EVENTS = 64  # default DURABLE_HOST_INLINE_EVENTS (see where it is read)
MAX_COUNTED_AHEAD = 100_000  # instances whose next attempt a commit counted (memory bound)
Result = tuple[ActivityWork, dict[str, Any]]  # an activity's work item and its result message


_FLAGS = {"1": True, "true": True, "yes": True, "on": True}
_FLAGS.update({"0": False, "false": False, "no": False, "off": False})


def _env_flag(name: str, default: bool) -> bool:
    """A boolean setting; unset or empty is ``default``, anything unreadable is refused."""
    value = os.environ.get(name, "").strip().lower()
    if not value:
        return default
    if value not in _FLAGS:
        raise ConfigError(f"{name}={value!r} is not a boolean (1/0, true/false, yes/no, on/off)")
    return _FLAGS[value]


def _env_int(name: str, default: int) -> int:
    """A non-negative whole-number setting; unset or empty is ``default``."""
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    if not value.isdigit():
        raise ConfigError(f"{name}={value!r} is not a whole number >= 0")
    return int(value)


def _session_verify() -> int:
    """``DURABLE_HOST_SESSION_VERIFY``: ``doubling`` (the default: a full replay whenever the
    history doubled since the last one), ``N`` (every Nth episode) or ``0`` (never); see
    sessions.py."""
    name = "DURABLE_HOST_SESSION_VERIFY"
    value = os.environ.get(name, "").strip()
    if value.lower() == "doubling":
        return sessions.VERIFY_DOUBLING
    if value and not value.isdigit():
        raise ConfigError(f"{name}={value!r} is not a whole number >= 0 or 'doubling'")
    return _env_int(name, sessions.VERIFY_DOUBLING)


def _history_cache(on: bool) -> replay.HistoryCache | None:
    """The history cache the replay optimisations use (none without them)."""
    return replay.HistoryCache(_env_int("DURABLE_HOST_HISTORY_CACHE", 20_000)) if on else None


def _run_episode(
    handle: Any,
    view: orchestration.InstanceView,
    *args: Any,
    history_text: replay.HistoryText | None = None,
    **kwargs: Any,
) -> orchestration.Episode:
    """``orchestration.run_episode`` in a worker thread, first bringing ``history_text`` up
    to the whole stored history (a cache miss encodes it once here, off the event loop)."""
    if history_text is not None and history_text.covers < len(view.history):
        history_text.extend(view.history[history_text.covers :])
    return orchestration.run_episode(handle, view, *args, history_text=history_text, **kwargs)


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
        fast_replay: bool | None = None,
        poison_attempts: int | None = None,
    ):
        self.index = index
        self.store = store
        self.config = config
        self.client_json = client_json
        self.now = clock
        # Settings a deployment rarely changes come from the environment, like the
        # fault plan: DURABLE_HOST_FAST_REPLAY, DURABLE_HOST_SESSIONS,
        # DURABLE_HOST_POISON_ATTEMPTS, DURABLE_HOST_HISTORY_CACHE (events).
        self.fast_replay = (
            _env_flag("DURABLE_HOST_FAST_REPLAY", True) if fast_replay is None else fast_replay
        )
        self.poison_attempts = poison_attempts or _env_int(
            "DURABLE_HOST_POISON_ATTEMPTS", MAX_ACTIVITY_ATTEMPTS
        )
        self.cache = _history_cache(self.fast_replay)
        # On unless host.json's extendedSessionsEnabled is false; DURABLE_HOST_SESSIONS
        # overrides. A session checks determinism when it is rebuilt, or every Nth episode.
        self.sessions = self.fast_replay and _env_flag(
            "DURABLE_HOST_SESSIONS", config.extended_sessions
        )
        # DURABLE_HOST_SESSION_VERIFY: which episodes of a session replay in full anyway.
        self.session_verify = _session_verify()
        # DURABLE_HOST_INLINE_EVENTS: an episode whose stored history has fewer events runs
        # on the event loop instead of a worker thread (0: every episode in a thread).
        self.inline_events = _env_int("DURABLE_HOST_INLINE_EVENTS", INLINE_EVENTS)
        # Orchestrator functions an episode of which failed on the loop and not in a thread.
        self._needs_thread: set[Callable[..., Any]] = set()
        # One commit per step (DURABLE_HOST_STEP_COMMIT=0 turns it off, for comparisons):
        # an activity's result is committed with the episode it unblocks, and a commit (or
        # a start) counts the next episode's attempt in advance.
        self.step_commits = _env_flag("DURABLE_HOST_STEP_COMMIT", True)
        # Activity results handed over by the runner, for the instance's next episode.
        self._results: dict[str, list[Result]] = {}
        self._inbox: set[str] = set()  # instances told of stored messages since their fetch
        # Instances whose last commit here counted their next attempt: the commit's time.
        self._counted: dict[str, str] = {}
        # Starts committed here that counted their first attempt: the start's time, the
        # message's inbox id and the message, for the first episode (``started``).
        self._starts: dict[str, tuple[str, int, dict[str, Any]]] = {}
        self._failures: dict[str, int] = {}  # instances whose processing failed, in a row
        # Instances whose last attempt a store error ended: its count, for the next attempt.
        self._uncounted: dict[str, int] = {}
        self.parking = versioning.Parking()  # instances left untouched for their version
        self._ready: asyncio.Queue[str] = asyncio.Queue()
        self._queued: set[str] = set()
        self._running: set[str] = set()
        self._dirty: set[str] = set()
        self._wake = asyncio.Event()
        self._orchestrator_slots = asyncio.Semaphore(max(1, config.max_orchestrators))
        self._entity_slots = asyncio.Semaphore(max(1, config.max_entities))
        self._workers: list[asyncio.Task[None]] = []
        self._stopping = False
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
            for name in ("attempt", "load", "replay", "commit", "episode", "entity_batch")
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

    async def _release_counted(self, deadline: float) -> None:
        """Give back the attempts commits counted in advance for episodes that never began:
        a graceful stop is no crash, so it must not bring an instance nearer to poison."""
        counted, self._counted = list(self._counted), {}
        if not counted:
            return
        releases = [self.store.release_attempt(instance_id) for instance_id in counted]
        remaining = max(0.1, deadline - asyncio.get_running_loop().time())
        try:
            async with asyncio.timeout(remaining):
                outcomes = await asyncio.gather(*releases, return_exceptions=True)
        except TimeoutError:
            log.warning("stop: %d attempts counted in advance were left counted", len(counted))
            return
        failed = sum(isinstance(outcome, BaseException) for outcome in outcomes)
        if failed:
            log.warning("stop: %d attempts counted in advance were left counted", failed)

    def notify(self, instance_id: str) -> None:
        """Mark an instance ready (it has, or may have, visible messages)."""
        if self._stopping:
            return
        self._inbox.add(instance_id)
        self._ready_up(instance_id)

    def counts_first(self, start: dict[str, Any]) -> bool:
        """Whether a start may count its first episode's attempt in advance and hand its
        message over (``Store.create_instance``'s ``count_first``, then ``started``): as a
        commit counts the step after it (``_counts_next``), never with a single attempt
        allowed, and not for a version this host would leave untouched (a parked instance
        is not counted)."""
        return (
            self.step_commits
            and self.poison_attempts >= 2
            and not self._stopping
            and len(self._starts) < MAX_COUNTED_AHEAD
            and versioning.blocked(self.config.versioning, None, None, [start]) is None
        )

    def started(
        self, instance_id: str, message_id: int | None, start: dict[str, Any], now: str
    ) -> None:
        """An immediate start this host committed at ``now``. With the start message's inbox
        id (the store counted the first attempt with it) the first episode takes ``start``
        from here: it neither reads the inbox, nor counts, nor reads the history (a start
        leaves none) - unless it is not all there is to know (``_handed_start``)."""
        if message_id is None or self._stopping:
            self.notify(instance_id)
            return
        self._starts[instance_id] = (now, message_id, start)
        self._note_counted(instance_id, True, now)
        self._ready_up(instance_id)

    def deliver(self, work: ActivityWork, message: dict[str, Any]) -> bool:
        """Take an activity's result for its instance's next episode, which commits both
        in one transaction (``commit_step``); False: the runner completes it by itself.

        Results that arrive while the instance's episode runs wait for the next one, which
        takes them all (a fan-in becomes a few episodes, not one per result). Until that
        commit a result lives only here: a crash runs its activity again, as a crash
        between an activity's return and its own completion always did.
        """
        if self._stopping or not self.step_commits:
            return False
        self._results.setdefault(work.instance_id, []).append((work, message))
        self._ready_up(work.instance_id)
        return True

    def _ready_up(self, instance_id: str) -> None:
        if self._stopping:
            return
        if instance_id in self._running:
            self._dirty.add(instance_id)
        elif instance_id not in self._queued:
            self._queued.add(instance_id)
            self._ready.put_nowait(instance_id)

    def rediscover(self, instance_id: str) -> None:
        """A scan found waiting messages again: take the instance unless it is parked."""
        if not self.parking.skips(instance_id, time.monotonic()):
            self.notify(instance_id)

    def wake_timers(self) -> None:
        self._wake.set()

    def busy(self) -> bool:
        """Whether anything is queued or running (``wake.IdleWatch`` reads it)."""
        return bool(self._queued or self._running or self._results or self.activities.running)

    # --- orchestrations and entities ----------------------------------------------

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
            except Exception:  # noqa: BLE001 - logged and retried with back-off, never lost
                self._dirty.discard(instance_id)
                self._retry_later(instance_id)
            finally:
                logs.instance.reset(token)
                self._running.discard(instance_id)
                if instance_id in self._dirty:
                    self._dirty.discard(instance_id)
                    self._ready_up(instance_id)

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

    async def _process(self, instance_id: str) -> None:
        """One episode or entity batch, with the activity results waiting for it; results
        it does not commit are completed one by one."""
        results = self._take_results(instance_id)
        committed = False
        try:
            committed = await self._process_messages(instance_id, results)
        finally:
            if results and not committed:
                self._complete_apart(results)

    def _take_results(self, instance_id: str) -> list[Result]:
        pending = self._results.pop(instance_id, None)
        if not pending:
            return []
        limit = max(1, self.store.max_step_completions)
        if len(pending) > limit:
            self._results[instance_id] = pending[limit:]
            self._dirty.add(instance_id)  # the rest go to the next episode
            pending = pending[:limit]
        return pending

    def _complete_apart(self, results: list[Result]) -> None:
        """Results no episode commits: each completed in its own transaction (retried)."""
        for work, message in results:
            self.activities.complete(work, message)

    async def _process_messages(self, instance_id: str, results: list[Result]) -> bool:
        """The instance record is read once for all of it; True if ``results`` committed.

        Without stored messages to expect (the instance was only handed results), the
        inbox is not read: anything stored meanwhile comes with a ``notify`` of its own.
        """
        now = self.now()
        messages: list[tuple[int, dict[str, Any]]] = []
        record, read = None, 0.0
        fresh = await self._handed_start(instance_id)
        if fresh is not None:
            record, read, start = fresh
            messages = [start]
        elif not results or instance_id in self._inbox:
            self._inbox.discard(instance_id)
            messages = await self.store.fetch_messages(instance_id, now, MESSAGE_BATCH)
            if len(messages) >= MESSAGE_BATCH:
                self._inbox.add(instance_id)
                self._dirty.add(instance_id)
        if not messages and not results:
            return False
        for message_id, message in messages:
            if message.get("kind") == MessageKind.UNDECODABLE:
                log.error(
                    "inbox message %d cannot be decoded: %s", message_id, message.get("error")
                )
        # Results take ids no inbox message has; the commit tells the store which it took.
        incoming = messages + [(-1 - n, message) for n, (_, message) in enumerate(results)]
        entity_id = instance_id.startswith("@")
        if fresh is None:
            record, read = await self._read_record(instance_id)
        status = record.status if record else None
        if not entity_id and orchestration.all_held(status, [m for _, m in incoming]):
            return False  # e.g. events for a suspended instance: nothing to do, nothing to count
        verdict = None if entity_id else self._version_verdict(instance_id, record, incoming)
        if verdict is not None and not verdict.fail:
            return False  # parked: untouched, not even counted as an attempt
        counting = time.perf_counter()
        attempts, poison = await self._count_attempt(instance_id, record)
        if verdict is not None:
            poison = poison or verdict.reason
        self.timings["attempt"].append(time.perf_counter() - counting)
        try:
            if entity_id:
                async with self._entity_slots:
                    await self._entity_batch(instance_id, record, messages, now, poison)
                return False
            async with self._orchestrator_slots:
                return await self._episode(
                    instance_id, record, incoming, results, now, poison, read, fresh is not None
                )
        except StoreError:
            self._uncounted[instance_id] = attempts
            raise

    def _version_verdict(
        self,
        instance_id: str,
        record: InstanceRecord | None,
        messages: list[tuple[int, dict[str, Any]]],
    ) -> versioning.Verdict | None:
        """This host's verdict on the version of the code these messages would run."""
        verdict = versioning.blocked(
            self.config.versioning,
            record.status if record else None,
            record.version if record else None,
            [m for _, m in messages],
            record.name if record else "",
        )
        if verdict is None:
            self.parking.release(instance_id)
        elif not verdict.fail and self.parking.park(
            instance_id, verdict, self.now(), time.monotonic()
        ):
            log.warning("left untouched: %s", verdict.reason)
        return verdict

    async def _handed_start(
        self, instance_id: str
    ) -> tuple[InstanceRecord, float, tuple[int, dict[str, Any]]] | None:
        """The start message ``started`` handed over, with the instance record and the
        seconds its read took, when it is all there is to know: no message was told of since
        (``notify``) and nothing wrote the instance since its start (the record is the
        start's own). None: the episode reads the inbox and counts, as for any message."""
        handed = self._starts.pop(instance_id, None)
        if handed is None or instance_id in self._inbox:
            return None
        at, message_id, message = handed
        record, read = await self._read_record(instance_id)
        if record is None or record.updated_at != at:
            return None
        return record, read, (message_id, message)

    async def _read_record(self, instance_id: str) -> tuple[InstanceRecord | None, float]:
        """The instance record for an episode, and the seconds its read took."""
        reading = time.perf_counter()
        record = await self.store.episode_record(instance_id)
        return record, time.perf_counter() - reading

    async def _count_attempt(
        self, instance_id: str, record: InstanceRecord | None
    ) -> tuple[int, str | None]:
        """Count this attempt (unless a store error ended the last one: it takes its
        place; or this host's last commit of the instance counted it already, and nothing
        wrote the instance since); the count, and past the bound, the reason the instance is
        quarantined."""
        attempts = self._uncounted.pop(instance_id, None)
        if attempts is None:
            counted = self._counted.pop(instance_id, None)
            if counted is not None and record is not None and counted == record.updated_at:
                attempts = 1
            else:
                attempts = await self.store.begin_attempt(instance_id)
        if attempts <= self.poison_attempts:
            if attempts > 1:
                log.warning("attempt %d: the previous attempt did not finish", attempts)
            return attempts, None
        return attempts, (
            f"quarantined as poison after {attempts - 1} attempts that did not finish"
            " (the host process died, or processing failed, every time)"
        )

    async def _decide(
        self,
        decide: Callable[[], orchestration.Episode],
        handle: Any,
        history_length: int,
        session: sessions.Session | None,
    ) -> orchestration.Episode:
        """Run ``decide`` on the event loop when the history is short and the orchestrator a
        generator function, else in a worker thread (docs/architecture.md, "Short episodes
        on the loop"). An episode that fails on the loop is decided again in a thread:
        code that needs a thread's view of asyncio (a loop of its own, ``run_until_complete``)
        fails on the loop, and must get the answer the Python worker's thread gives; when
        the thread's answer is not a failure, that function's later episodes go to a thread
        straight away (``_needs_thread``: a set of the app's functions, bounded by it)."""
        fn = getattr(handle, "orchestrator_function", None)
        if (
            history_length >= self.inline_events
            or not inspect.isgeneratorfunction(fn)
            or fn in self._needs_thread
        ):
            return await asyncio.to_thread(decide)
        episode = contextvars.copy_context().run(decide)  # the context to_thread would give
        if episode.status != RuntimeStatus.FAILED:
            return episode
        if session is not None:
            session.reset()  # the failed run's objects: the thread replays in full
        self.stats["episodes_decided_again"] = self.stats.get("episodes_decided_again", 0) + 1
        again = await asyncio.to_thread(decide)
        if again.status != RuntimeStatus.FAILED:
            self._needs_thread.add(fn)  # it fails on the loop only: not tried there again
        return again

    async def _episode(
        self,
        instance_id: str,
        record: InstanceRecord | None,
        messages: list[tuple[int, dict[str, Any]]],
        results: list[Result],
        now: str,
        poison: str | None,
        read: float,
        fresh: bool = False,
    ) -> bool:
        """``messages`` includes ``results`` (under negative ids); ``read``: seconds the
        instance record took to read (part of the ``load`` timing); ``fresh``: the first
        episode of a start handed over (``started``), whose history is empty. True if the
        results were committed with the episode."""
        loading = time.perf_counter() - read
        try:
            history, session, text = await self._history(instance_id, record, fresh)
        except CorruptHistoryError as exc:
            stored = [(i, m) for i, m in messages if i >= 0]
            await self._quarantine_unreadable(instance_id, record, stored, str(exc), now)
            return False
        self.timings["load"].append(time.perf_counter() - loading)
        starts = [m for _, m in messages if m["kind"] == MessageKind.START]
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
        continued = session.continued if session is not None else 0
        started = time.perf_counter()
        decide = functools.partial(
            _run_episode,
            handle,
            view,
            messages,
            now,
            # Only a start message opens an execution: other episodes need no id (and
            # uuid4 asks the kernel for randomness each time).
            uuid.uuid4().hex if starts else "",
            compact=self.fast_replay,
            poison=poison,
            session=session,
            history_text=text,
            default_version=self.config.versioning.default_version,
        )
        episode = await self._decide(decide, handle, len(history), session)
        replayed = time.perf_counter()
        if not episode.consumed:
            return False  # everything is held (suspended): nothing to commit
        traced = telemetry.trace_episode(instance_id, history, episode)  # stamps what it sends
        taken = set(episode.consumed)
        completions = [
            Completion(work.work_id, message, consumed=(-1 - n) in taken)
            for n, (work, message) in enumerate(results)
        ]
        episode.consumed = [i for i in episode.consumed if i >= 0]
        count_next = self._counts_next(record, episode)
        faults.hit("episode.before_commit")
        try:
            if completions:
                faults.hit("step.before_commit")
                created = await self.store.commit_step(
                    instance_id, completions, episode, now, count_next=count_next
                )
            else:
                created = await self.store.commit_episode(
                    instance_id, episode, now, count_next=count_next
                )
        except BaseException:
            self._forget(instance_id)  # the session ran ahead of the store
            self._counted.pop(instance_id, None)
            raise
        if created is None:
            # Another run reported one of the results: nothing applied. The results go one
            # by one (the others are stored, that one is not) and the episode runs again.
            self._forget(instance_id)
            self._inbox.add(instance_id)
            self._dirty.add(instance_id)
            log.info("an activity result was reported by another run; the episode runs again")
            return False
        faults.hit("episode.after_commit")
        if completions:
            faults.hit("step.after_commit")
            self.stats["step_commits"] = self.stats.get("step_commits", 0) + 1
            self.stats["step_results"] = self.stats.get("step_results", 0) + len(completions)
        self._note_counted(instance_id, count_next, now)
        done = time.perf_counter()
        self._remember(instance_id, record, history, episode, now, session, text)
        self.timings["replay"].append(replayed - started)
        self.timings["commit"].append(done - replayed)
        self.timings["episode"].append(done - started)
        self.stats["episodes"] += 1
        previous = record.status if record else None
        telemetry.episode_done(traced, episode, started, previous, len(history))
        if session is not None and session.continued > continued:
            self.stats["session_steps"] = self.stats.get("session_steps", 0) + 1
        if episode.status and episode.status != previous:
            log.info("instance is %s", episode.status)
        if poison is not None:
            log.error("orchestration %s", poison)
        for work in created:
            self.activities.spawn(work, fresh=True)
        self._dispatch(episode.outbox, now)
        return bool(completions)

    def _counts_next(self, record: InstanceRecord | None, episode: orchestration.Episode) -> bool:
        """Whether the commit counts the next episode's attempt in advance: for a running
        instance whose next episode is most likely a step this host runs (it scheduled an
        activity). A crash before that episode (in the activity) leaves the advance count
        standing - one attempt more than happened - so never with a single attempt allowed,
        and never while only other instances' work is awaited (a crash there is not this
        instance's doing; its next episode counts for itself)."""
        if not self.step_commits or self.poison_attempts < 2:
            return False
        status = episode.status or (record.status if record else None)
        return status == RuntimeStatus.RUNNING and any(
            item.kind == OutgoingKind.ACTIVITY for item in episode.outbox
        )

    def _note_counted(self, instance_id: str, counted: bool, now: str) -> None:
        self._counted.pop(instance_id, None)
        if counted:
            if len(self._counted) >= MAX_COUNTED_AHEAD:
                self._counted.clear()  # forgetting costs only a count write per instance
            self._counted[instance_id] = now

    async def _history(
        self, instance_id: str, record: InstanceRecord | None, fresh: bool = False
    ) -> tuple[list[dict[str, Any]], sessions.Session | None, replay.HistoryText | None]:
        """The stored history (from the cache when it is current; none after a ``fresh``
        start), the SDK session to use and the history's SDK text (a new one, filled by the
        episode, on a cache miss)."""
        if self.cache is not None and record is not None and not fresh:
            cached = self.cache.get(instance_id, (record.execution_id, record.updated_at))
            if cached is not None:
                return (
                    cached,
                    self._session(self.cache.session(instance_id)),
                    self._text(self.cache.text(instance_id)),
                )
        text = self._text(None) if self.cache is not None else None
        history = [] if fresh else await self.store.get_history(instance_id)
        return history, self._session(None), text

    def _session(self, kept: sessions.Session | None) -> sessions.Session | None:
        if not self.sessions:
            return None
        return kept if kept is not None else sessions.Session(self.session_verify)

    def _text(self, kept: replay.HistoryText | None) -> replay.HistoryText | None:
        if self.sessions:
            return None  # a session hands the SDK events, not text
        return kept if kept is not None else replay.HistoryText()

    def _forget(self, instance_id: str) -> None:
        if self.cache is not None:
            self.cache.evict(instance_id)

    def _remember(
        self,
        instance_id: str,
        record: InstanceRecord | None,
        history: list[dict[str, Any]],
        episode: orchestration.Episode,
        now: str,
        session: sessions.Session | None,
        text: replay.HistoryText | None = None,
    ) -> None:
        """Keep the history (SDK session, history text) of an instance woken soon; forget a
        waiting one."""
        if self.cache is None:
            return
        status = episode.status or (record.status if record else None)
        hot = any(
            item.kind == OutgoingKind.ACTIVITY or item.visible_at is None for item in episode.outbox
        )
        if status != RuntimeStatus.RUNNING or not hot:
            self.cache.evict(instance_id)
            return
        fresh = episode.replace_history or episode.rewrite_history
        events = episode.events if fresh else [*history, *episode.events]
        if fresh or text is None or text.covers != len(history):
            text = None  # rebuilt by the next episode that needs it
        else:
            text.extend(episode.events)
        execution_id = (
            episode.execution_id
            if episode.replace_history
            else (record.execution_id if record else None)
        )
        self.cache.put(instance_id, (execution_id, now), events, session, text)

    async def _quarantine_unreadable(
        self,
        instance_id: str,
        record: InstanceRecord | None,
        messages: list[tuple[int, dict[str, Any]]],
        reason: str,
        now: str,
    ) -> None:
        name = record.name if record else ""
        consumed = [message_id for message_id, _ in messages]
        episode = orchestration.unreadable_history_episode(name, consumed, reason, now)
        await self.store.commit_episode(instance_id, episode, now)
        if self.cache is not None:
            self.cache.evict(instance_id)
        log.error("orchestration quarantined: %s", reason)

    def _dispatch(self, outbox: list[orchestration.Outgoing], now: str) -> None:
        for item in outbox:
            if item.kind != OutgoingKind.MESSAGE:
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
        self.cache = _history_cache(on)
        replay.install(on)
        sdk_codec.install(on)

    async def _entity_batch(
        self,
        instance_id: str,
        record: InstanceRecord | None,
        messages: list[tuple[int, dict[str, Any]]],
        now: str,
        poison: str | None,
    ) -> None:
        started = time.perf_counter()
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
            poison,
            self.now,  # responses are stamped when the batch's results exist (entity.py)
        )
        faults.hit("entity.before_commit")
        await self.store.commit_entity(commit)
        faults.hit("entity.after_commit")
        telemetry.entity_batch_done(instance_id, messages, started, poison)
        if poison is not None:
            log.error("entity batch of %d messages %s", len(messages), poison)
        self.stats["entity_batches"] = self.stats.get("entity_batches", 0) + 1
        self.stats["entity_operations"] = self.stats.get("entity_operations", 0) + len(messages)
        self.timings["entity_batch"].append(time.perf_counter() - started)
        for target, _ in commit.responses:
            self.notify(target)

    # --- timers -------------------------------------------------------------------

    async def _timer_loop(self) -> None:
        failures = 0
        while True:
            self._wake.clear()
            try:
                wait = await self._fire_due_timers()
                failures = 0
            except Exception:
                # A store outage must not end the loop: timers would never fire again.
                failures += 1
                wait = min(MAX_IDLE_WAIT, 0.5 * 2**failures)
                log.warning("timer scan failed; retrying in %.1fs", wait, exc_info=True)
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
