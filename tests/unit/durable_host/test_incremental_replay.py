"""Incremental replay (sessions.py) decides exactly what a full replay decides, episode by
episode, and a session that cannot be trusted is rebuilt, where changed code is caught.

The golden histories (tests/replay/histories: real runs of the app's orchestrators) are cut
into their episodes and fed to a live session one episode at a time; at every episode its
decisions - new events, messages, done, output, error, custom status - must equal those of
a full replay of the same history. The other tests pin the safety rules: a session rebuilt
after a code change fails the instance with the named mismatch, a change of the source file
on disk ends the session, a full replay on schedule catches code that decides differently when
re-run, and a timer cancelled behind the walk's cursor gives what a full walk gives.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import azure.durable_functions as df
import pytest

from durable_host.core import orchestration as o
from durable_host.core import replay, sessions
from durable_host.core.history import Event, EventType
from durable_host.core.sessions import Session
from durable_host.functions import sdk_codec
from tests.replay.test_golden_histories import HANDLES, HISTORIES
from tests.unit.durable_host.driver import Driver

DECISIONS = frozenset(
    {
        EventType.TASK_SCHEDULED,
        EventType.SUB_ORCHESTRATION_CREATED,
        EventType.TIMER_CREATED,
        EventType.EVENT_SENT,
    }
)
ENDINGS = frozenset({EventType.EXECUTION_COMPLETED, EventType.ORCHESTRATOR_COMPLETED})


@pytest.fixture(autouse=True)
def fast_replay() -> Iterator[None]:
    replay.install(True)
    sdk_codec.install(True)
    yield
    replay.install(False)
    sdk_codec.install(False)


def episodes(events: list[Event]) -> Iterator[tuple[int, int]]:
    """(start, end) of each episode's input: its OrchestratorStarted and the events it took
    in, up to the first event the episode itself decided."""
    for start, event in enumerate(events):
        if event["EventType"] != EventType.ORCHESTRATOR_STARTED:
            continue
        end = start + 1
        while (
            end < len(events)
            and events[end]["EventType"] not in DECISIONS | ENDINGS
            and events[end]["EventType"] != EventType.ORCHESTRATOR_STARTED
        ):
            end += 1
        yield start, end


def outcome(decided: Any, shim: Any, resolved: bool) -> tuple[Any, ...]:
    """What an episode decides, whichever way it was computed (the action list aside: a
    continued session lists only the new actions)."""
    return (
        decided.is_done,
        decided.output,
        decided.error,
        decided.custom_status,
        decided.raw_failure,
        resolved,
        shim.new_events if shim else None,
        shim.outbox if shim else None,
    )


@pytest.mark.filterwarnings("ignore:Potential duplicate Task completion")
@pytest.mark.parametrize("path", HISTORIES, ids=[f"{p.parent.name}/{p.stem}" for p in HISTORIES])
def test_a_session_decides_every_episode_of_a_golden_history_as_a_full_replay(path: Path):
    recorded = json.loads(path.read_text())
    handle = HANDLES[recorded["orchestrator"]]
    events = recorded["events"]
    started = next(e for e in events if e["EventType"] == EventType.EXECUTION_STARTED)
    execution_id = started["OrchestrationInstance"]["ExecutionId"]
    session = Session(verify_every=0)  # every episode that can continue does
    cuts = list(episodes(events))
    assert len(cuts) >= 2, "a golden history has more than one episode"
    for start, end in cuts:
        history, prefix = events[:start], events[start:end]
        now = prefix[0]["Timestamp"]
        view = o.InstanceView(
            recorded["instance_id"], "Running", execution_id, history, recorded["orchestrator"]
        )
        step = o._Step(handle, view, prefix, started, now, None)
        full = o._replayed(step, True)
        live = o._live(step, session)
        assert outcome(*live) == outcome(*full), f"episode at event {start}"
        recorded_decisions = [
            (e["EventType"], e["EventId"])
            for e in events[end:]
            if e["EventType"] in DECISIONS and e["Timestamp"] == now
        ]
        assert [(e["EventType"], e["EventId"]) for e in live[1].new_events] == (
            recorded_decisions[: len(live[1].new_events)]
        )
    assert session.continued >= len(cuts) - 2  # a golden history is mostly continued
    final = live[0]
    assert final.is_done and final.output == recorded["output"]


def say_chain(context: df.DurableOrchestrationContext):
    results = []
    for city in ("Tokyo", "Seattle", "London", "Paris"):
        results.append((yield context.call_activity("say", city)))
    return results


def greet_chain(context: df.DurableOrchestrationContext):
    """``say_chain`` after a deployment that renamed its activity."""
    results = []
    for city in ("Tokyo", "Seattle", "London", "Paris"):
        results.append((yield context.call_activity("greet", city)))
    return results


def session_driver(fn: Callable[..., Any], session: Session, monkeypatch) -> Driver:
    original = o.run_episode

    def run(*args: Any, **kwargs: Any) -> o.Episode:
        return original(*args, **{**kwargs, "compact": True, "session": session})

    monkeypatch.setattr(o, "run_episode", run)
    return Driver(df.Orchestrator.create(fn), name="chain")


def test_a_changed_orchestrator_is_caught_when_the_live_session_is_rebuilt(monkeypatch):
    session = Session(verify_every=0)  # rebuilt only by the change
    d = session_driver(say_chain, session, monkeypatch)
    d.start()
    d.complete(0, "a")
    d.complete(1, "b")
    assert session.continued == 2
    # A new deployment: the same session object meets another orchestrator function. It
    # must not continue the old generator; it rebuilds by a full replay of the new code.
    d.handle = df.Orchestrator.create(greet_chain)
    d.complete(2, "c")

    assert session.continued == 2
    assert d.status == "Failed"
    message = str(d.output)
    assert "Non-Deterministic workflow detected" in message
    assert "TaskScheduled #0 (activity 'say')" in message
    assert "a call to activity 'greet'" in message


def test_a_change_of_the_orchestrator_source_on_disk_ends_the_live_session(tmp_path, monkeypatch):
    source = tmp_path / "deployed_chain.py"
    source.write_text(
        "def chain(context):\n"
        "    total = 0\n"
        "    for _ in range(4):\n"
        "        total += yield context.call_activity('say', 1)\n"
        "    return total\n"
    )
    spec = importlib.util.spec_from_file_location("deployed_chain", source)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "deployed_chain", module)
    spec.loader.exec_module(module)
    session = Session(verify_every=0)  # rebuilt only by the change
    d = session_driver(module.chain, session, monkeypatch)
    d.start()
    d.complete(0, 1)
    d.complete(1, 1)
    assert session.continued == 2
    source.write_text(source.read_text() + "# deployed again\n")
    os.utime(source, ns=(1, 1))  # a different time even on a coarse clock
    monkeypatch.setattr(sessions, "STAMP_SECONDS", 0.0)  # as if the stat's second had passed
    d.complete(2, 1)
    assert session.continued == 2  # rebuilt by a full replay
    d.complete(3, 1)

    assert session.continued == 3 and (d.status, d.output) == ("Completed", 4)


def test_a_source_file_is_statted_at_most_once_per_stamp_period(tmp_path, monkeypatch):
    source = tmp_path / "stamped.py"
    source.write_text("def f():\n    return 1\n")
    spec = importlib.util.spec_from_file_location("stamped", source)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fn = module.f
    monkeypatch.setattr(sessions, "_stamps", {})
    statted: list[str] = []
    counting = SimpleNamespace(stat=lambda path: statted.append(path) or os.stat(path))
    monkeypatch.setattr(sessions, "os", counting)  # this module's os only

    first = sessions.code_stamp(fn, now=100.0)
    source.write_text("def f():\n    return 2  # deployed again\n")
    os.utime(source, ns=(1, 1))
    within = sessions.code_stamp(fn, now=100.0 + sessions.STAMP_SECONDS / 2)
    assert within == first and len(statted) == 1  # served from the cached stat
    after = sessions.code_stamp(fn, now=100.0 + sessions.STAMP_SECONDS)
    assert after != first and len(statted) == 2  # the change seen once the period passed
    assert sessions.code_stamp(print) == (id(print), 0, 0)  # no source file: nothing to stat


def test_a_copied_orchestrator_is_what_the_sdk_constructs_with_state_of_its_own():
    def fn(context):
        yield context.call_activity("a", 1)

    built, copied = df.Orchestrator(fn), sessions.new_orchestrator(fn)
    other = sessions.new_orchestrator(fn)
    built_run, copied_run = built.task_orchestration_executor, copied.task_orchestration_executor

    assert vars(copied).keys() == vars(built).keys() and copied.fn is fn
    assert vars(copied_run).keys() == vars(built_run).keys()
    assert {k: tuple(v) for k, v in copied_run.event_to_SetTaskValuePayload.items()} == {
        k: tuple(v) for k, v in built_run.event_to_SetTaskValuePayload.items()
    }
    assert copied_run.task_completion_events == built_run.task_completion_events
    # Per-run state is each copy's own: a run of one leaves the other untouched.
    copied_run.output, copied_run.orchestrator_returned = "done", True
    assert other.task_orchestration_executor is not copied_run
    assert other.task_orchestration_executor.output is None
    assert other.task_orchestration_executor.current_task is not copied_run.current_task


CALLS: list[int] = []


def restless(context: df.DurableOrchestrationContext):
    """Not deterministic: asks for a different activity every time it runs."""
    for _ in range(4):
        CALLS.append(1)
        yield context.call_activity(f"step{len(CALLS)}", None)
    return "done"


def test_a_scheduled_full_replay_fails_code_that_decides_differently_when_re_run(monkeypatch):
    CALLS.clear()
    session = Session(verify_every=2)  # every second episode of a session replays in full
    d = session_driver(restless, session, monkeypatch)
    d.start()
    d.complete(0, None)
    assert d.status == "Running" and session.continued == 1
    d.complete(1, None)  # replayed in full: the code now asks for other activities

    assert session.checks == 1
    assert d.status == "Failed"
    message = str(d.output)
    assert "Non-Deterministic workflow detected" in message
    assert "activity 'step1'" in message  # what history recorded, named


def test_by_default_a_young_instance_is_replayed_in_full_at_once(monkeypatch):
    CALLS.clear()
    session = Session()  # the default schedule: a full replay whenever the history doubled
    d = session_driver(restless, session, monkeypatch)
    d.start()
    d.complete(0, None)  # the history doubled since the first episode

    assert session.checks == 1 and session.continued == 0
    assert d.status == "Failed"
    assert "Non-Deterministic workflow detected" in str(d.output)


def long_chain(context: df.DurableOrchestrationContext):
    total = 0
    for step in range(40):
        total += yield context.call_activity("say", step)
    return total


def test_by_default_full_replays_come_when_the_history_doubled(monkeypatch):
    session = Session()
    replayed_at: list[int] = []
    original = Session.rebuild

    def rebuild(self: Session, handle: Any, key: str, request: dict[str, Any]) -> str:
        replayed_at.append(len(request["history"]))  # the events the SDK reads
        return original(self, handle, key, request)

    monkeypatch.setattr(Session, "rebuild", rebuild)
    d = session_driver(long_chain, session, monkeypatch)
    d.start()
    for task_id in range(40):
        d.complete(task_id, 1)

    assert (d.status, d.output) == ("Completed", 40)
    assert session.checks == len(replayed_at) - 1  # every rebuild but the first is scheduled
    assert session.continued + len(replayed_at) == 41  # every episode one way or the other
    # The history doubles between checks: a handful for 40 steps, not one per step.
    assert 3 <= session.checks <= 7
    assert replayed_at == sorted(replayed_at) and replayed_at[-1] >= 8 * replayed_at[1]


def racing_a_retry(context: df.DurableOrchestrationContext):
    """A race whose losing timer is cancelled after the race: a full walk then finds the
    timer cancelled from the start, so the race resolves at once and the ids that follow
    are numbered from there (here the retry timer's id is taken again: a mismatch)."""
    options = df.RetryOptions(first_retry_interval_in_milliseconds=1000, max_number_of_attempts=3)
    timer = context.create_timer(context.current_utc_datetime + timedelta(minutes=5))
    event = context.wait_for_external_event("approve")
    flaky = context.call_activity_with_retry("flaky", options, None)
    winner = yield context.task_any([event, timer, flaky])
    if winner == event:
        timer.cancel()
    return (yield context.call_activity("after", 1))


@pytest.mark.filterwarnings("ignore:Potential duplicate Task completion")
def test_a_timer_cancelled_behind_the_cursor_gives_what_a_full_walk_gives(monkeypatch):
    def run(session: Session | None) -> Driver:
        original = o.run_episode

        def episode(*args: Any, **kwargs: Any) -> o.Episode:
            return original(*args, **{**kwargs, "compact": True, "session": session})

        monkeypatch.setattr(o, "run_episode", episode)
        d = Driver(df.Orchestrator.create(racing_a_retry), name="race")
        d.start()
        d.fail(1, "not yet")
        d.raise_event("approve", "yes")
        if d.status == "Running":
            d.complete(3, "done")
        monkeypatch.setattr(o, "run_episode", original)
        return d

    full, live = run(None), run(Session())

    assert (live.status, live.output) == (full.status, full.output)
    assert live.history == full.history
    assert [m.payload for m in live.messages] == [m.payload for m in full.messages]


def test_an_orchestrator_that_is_not_a_generator_function_is_never_continued(monkeypatch):
    def adapter(context: df.DurableOrchestrationContext):
        return say_chain(context)  # a generator made by other code: may rely on re-runs

    session = Session()
    d = session_driver(adapter, session, monkeypatch)
    d.start()
    for task_id in range(4):
        d.complete(task_id, task_id)

    assert session.continued == 0 and session.replays_only
    assert (d.status, d.output) == ("Completed", [0, 1, 2, 3])


def test_live_sessions_live_in_the_bounded_history_cache_and_leave_it_least_recently_used():
    cache = replay.HistoryCache(max_events=40)  # DURABLE_HOST_HISTORY_CACHE: the budget
    for i in range(5):
        cache.put(f"i{i}", ("e", "t"), [{"n": 0}] * 8, session=Session())
    assert cache.get("i0", ("e", "t")) is not None  # used: now the most recent
    cache.put("i5", ("e", "t"), [{"n": 0}] * 8, session=Session())

    assert cache.size <= 40 and len(cache) == 5
    assert cache.session("i1") is None  # evicted: its next episode rebuilds by a full replay
    assert cache.session("i0") is not None and cache.session("i5") is not None
