"""A live SDK orchestration between episodes: a step without replaying the steps before it.

The SDK rebuilds an orchestration on every episode by running its generator over the whole
history. A ``Session`` keeps the result of that work - the SDK's ``Orchestrator``, its
``TaskOrchestrationExecutor`` and ``DurableOrchestrationContext``, the generator suspended at
its last ``yield`` - and feeds the next episode only the events added since, through the
executor's own ``process_event``, then asks the executor for its state exactly as
``execute`` does. For orchestrator code that is deterministic (the Durable rule) the state is
the one a full replay computes: the actions list, output, custom status and failure are
accumulated by the same objects the replay would rebuild from scratch, and ``new_uuid``,
``current_utc_datetime`` and the #507 buffered events carry over unchanged. What does not
happen is the replay itself, so code guarded by ``context.is_replaying`` behaves as usual
and unguarded code is not re-run for past steps.

A session is used only when the events the SDK reads (``replay.sdk_history``) start with
exactly the events it has already processed (same objects or equal values) in the same
execution; anything else - a new execution, a rewound history, a session that finished,
failed or was dropped - falls back to a full replay, which starts a new session. The engine
keeps sessions only for hot instances, beside their cached history, and drops them the
moment an instance waits, finishes, or a commit fails. Equivalence is pinned by
tests/unit/durable_host/test_replay_equivalence.py.

Only orchestrator functions that are generator functions themselves are continued. A plain
function that *returns* a generator built by other code - an adapter such as the SDK's
OpenAI Agents integration (``durable_openai_agent_orchestrator``), whose generator ends
after yielding the task it is waiting for because it expects to be called again from the
start, with the result then found in the history - may rely on being re-run every
episode, so such an orchestrator is replayed in full every episode (``replays_only``).

``verify_every`` (``DURABLE_HOST_SESSION_VERIFY``) replays in full every Nth episode
instead of continuing, so the history check below still runs at that rate, and the session
goes on from the replay's objects. Code changed on disk does not reach a live session: the
host imports the app once, so a new deployment is a new process, whose instances all start
with a full replay (where the check runs).

The price: without the replay, the host cannot see orchestrator code that decides
differently when it runs again (the non-determinism check in ``shim.py`` compares a replay
with the history). That check is what makes an app that works here work on Azure, so
sessions are off unless ``DURABLE_HOST_SESSIONS=1``; an instance still replays whenever it
woke from waiting or the host restarted.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from typing import Any

from azure.durable_functions.models.DurableOrchestrationContext import (
    DurableOrchestrationContext,
)
from azure.durable_functions.models.history.HistoryEvent import HistoryEvent
from azure.durable_functions.orchestrator import Orchestrator

from durable_host.history import Event


class Session:
    """One instance's live SDK orchestration (see module doc). Not thread-safe: one episode
    at a time uses it, as the engine runs one episode at a time per instance."""

    def __init__(self, verify_every: int = 0) -> None:
        self.verify_every = verify_every  # replay in full every Nth episode (0: never)
        self._since_replay = 0
        self._key: str | None = None
        self._processed: list[Event] = []
        self._orchestrator: Orchestrator | None = None
        self._context: DurableOrchestrationContext | None = None
        self.continued = 0  # episodes served without a replay (for metrics and tests)
        self.replays_only = False  # the orchestrator may rely on re-running (module doc)

    def reset(self) -> None:
        self._key, self._processed = None, []
        self._orchestrator = self._context = None

    def answer(self, handle: Callable[[str], str], key: str, request: dict[str, Any]) -> str:
        """The SDK's answer to ``request`` (its JSON fields; ``history`` holds only the
        events the SDK reads); raises as the SDK's handle raises."""
        history: list[Event] = request["history"]
        done = len(self._processed)
        fits = (
            self._orchestrator is not None
            and not self.replays_only
            and self._key == key
            and len(history) > done
            and history[:done] == self._processed
            and not (self.verify_every and self._since_replay + 1 >= self.verify_every)
        )
        try:
            answer = self._continue(history[done:]) if fits else self._replay(handle, request)
        except Exception:
            self.reset()
            raise
        self._key, self._processed = key, history
        self.continued += fits
        self._since_replay = self._since_replay + 1 if fits else 0
        if json.loads(answer).get("isDone"):
            self.reset()  # finished: nothing will continue it
        return answer

    def _replay(self, handle: Callable[[str], str], request: dict[str, Any]) -> str:
        self.reset()
        fn = getattr(handle, "orchestrator_function", None)
        if fn is None:
            return handle(json.dumps(request))  # not an SDK handle: no session possible
        self.replays_only = not inspect.isgeneratorfunction(fn)
        # What Orchestrator.create(fn)'s handle does, keeping the objects it builds.
        context = DurableOrchestrationContext.from_json(json.dumps(request))
        context._input_expected_type = getattr(handle, "_df_input_type", None)  # noqa: SLF001
        orchestrator = Orchestrator(fn)
        answer = orchestrator.handle(context)
        self._orchestrator, self._context = orchestrator, context
        return answer

    def _continue(self, events: list[Event]) -> str:
        assert self._orchestrator is not None and self._context is not None
        executor = self._orchestrator.task_orchestration_executor
        histories = self._context.histories
        for event in events:
            parsed = HistoryEvent(**event)
            histories.append(parsed)
            executor._is_processing_new_events = True  # noqa: SLF001 - as execute() sets it
            executor.process_event(parsed)
            if executor.has_execution_completed:
                break
        return executor.get_orchestrator_state_str()
