"""One episode (or entity batch) top to bottom: take what is waiting, read the record, decide,
commit, release what the commit produced.

An episode of an orchestration: the activity results handed over (``deliver``) and, unless
it was handed only results or its start (``Attempts.started``), the inbox's visible
messages; the instance record (read once); the version gate and the attempt count
(``attempts.py``); the history (from the replay cache when it is current); the pure
decision (``orchestration.run_episode``, on the event loop when the history is short, else
in a worker thread); one store transaction; and only then the dispatch of what the commit
produced - activity work items to the runner, messages to other instances, timers to the
timer loop. An entity's batch takes the same road through ``entity.run_batch``.

One commit per step: an activity that ran here hands its result to the engine
(``deliver``) instead of completing it; the instance's next episode takes it as an
in-memory message (under a negative id), and ``Store.commit_step`` commits the result and
the episode in one transaction - the result is durable before anything the episode does
is released. Results that arrive while the instance's episode runs wait for the next
episode, which takes them all (a fan-in becomes a few episodes). A result no episode
commits (the instance is suspended or parked, the episode failed, another run reported it
first, the host stops) is completed by itself (``_complete_apart``), as every result was
before.

The replay cache (``replay.HistoryCache``) holds the histories - and, unless they are
turned off, the live SDK sessions (``core/sessions.py``) - of *hot* instances only, those with
an activity or message on its way, and drops an instance as soon as it waits, finishes, or
a commit of it fails. An inbox message that cannot be decoded is logged and fails its
instance through the episode; a history row that cannot be decoded quarantines the
instance at once (``_quarantine_unreadable``).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import logging
import time
import uuid
from collections import deque
from collections.abc import Callable
from typing import Any

from durable_host.core import entity, orchestration, replay
from durable_host.core.records import (
    ActivityWork,
    Completion,
    InstanceRecord,
    MessageKind,
    OutgoingKind,
    RuntimeStatus,
)
from durable_host.core.sessions import Session
from durable_host.engine.activity_runner import ActivityRunner
from durable_host.engine.attempts import Attempts
from durable_host.functions.loader import AppIndex
from durable_host.ops import faults, telemetry
from durable_host.store.base import CorruptHistoryError, StoreError

log = logging.getLogger("durable_host.engine")
MESSAGE_BATCH = 1000  # inbox messages taken into one episode
Result = tuple[ActivityWork, dict[str, Any]]  # an activity's work item and its result message


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


class Episodes(Attempts):
    """The episode pipeline of the engine (a base of ``engine.Engine``, above the attempts)."""

    index: AppIndex
    activities: ActivityRunner
    cache: replay.HistoryCache | None
    fast_replay: bool
    sessions: bool
    session_verify: int
    inline_events: int
    stats: dict[str, int]
    timings: dict[str, deque[float]]
    _orchestrator_slots: asyncio.Semaphore
    _entity_slots: asyncio.Semaphore

    def __init__(self) -> None:
        super().__init__()
        # Activity results handed over by the runner, for the instance's next episode.
        self._results: dict[str, list[Result]] = {}
        self._delivered: dict[str, float] = {}  # when an instance's first result came
        # Orchestrator functions an episode of which failed on the loop and not in a thread.
        self._needs_thread: set[Callable[..., Any]] = set()

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
        pending = self._results.setdefault(work.instance_id, [])
        if not pending:
            self._delivered[work.instance_id] = time.perf_counter()
        pending.append((work, message))
        self._ready_up(work.instance_id)
        return True

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
        delivered = self._delivered.pop(instance_id, None)
        if delivered is not None:  # from the first result's hand-over to its episode
            self.timings["wake"].append(time.perf_counter() - delivered)
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

    async def _decide(
        self,
        decide: Callable[[], orchestration.Episode],
        handle: Any,
        view: orchestration.InstanceView,
        session: Session | None,
    ) -> orchestration.Episode:
        """Run ``decide`` on the event loop when the orchestrator is a generator function and
        the history is short or its live session continues (the episode's work is then
        that of its new events), else in a worker thread (docs/architecture.md, "Short
        episodes on the loop"). An episode that fails on the loop is decided again in a thread:
        code that needs a thread's view of asyncio (a loop of its own, ``run_until_complete``)
        fails on the loop, and must get the answer the Python worker's thread gives; when
        the thread's answer is not a failure, that function's later episodes go to a thread
        straight away (``_needs_thread``: a set of the app's functions, bounded by it)."""
        fn = getattr(handle, "orchestrator_function", None)
        history = view.history
        if (
            (
                len(history) >= self.inline_events
                # A session that continues does the new events' work, not the history's.
                and not (
                    self.inline_events > 0
                    and session is not None
                    and session.continues(handle, view.execution_id or "", history)
                )
            )
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
        episode = await self._decide(decide, handle, view, session)
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

    async def _history(
        self, instance_id: str, record: InstanceRecord | None, fresh: bool = False
    ) -> tuple[list[dict[str, Any]], Session | None, replay.HistoryText | None]:
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

    def _session(self, kept: Session | None) -> Session | None:
        if not self.sessions:
            return None
        return kept if kept is not None else Session(self.session_verify)

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
        session: Session | None,
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
            self.now,  # responses are stamped when the batch's results exist (core/entity.py)
        )
        faults.hit("entity.before_commit")
        await self.store.commit_entity(commit)
        self._charged(instance_id, False)  # the commit reset the count
        faults.hit("entity.after_commit")
        telemetry.entity_batch_done(instance_id, messages, started, poison)
        if poison is not None:
            log.error("entity batch of %d messages %s", len(messages), poison)
        self.stats["entity_batches"] = self.stats.get("entity_batches", 0) + 1
        self.stats["entity_operations"] = self.stats.get("entity_operations", 0) + len(messages)
        self.timings["entity_batch"].append(time.perf_counter() - started)
        for target, _ in commit.responses:
            self.notify(target)
