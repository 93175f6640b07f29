"""Fast replay computes exactly what the plain replay computes (durable_host/core/replay.py, durable_host/core/sessions.py).

Every golden scenario runs three times through the pure episode driver: handing the SDK the
whole history with dateutil timestamps; with only the events it reads and the fast
timestamp parser; and continuing a live SDK session from episode to episode. The SDK's raw
answers (actions, output, custom status, failures) and every episode's events and messages
must be identical. What the orchestrator code saw (``is_replaying``,
``current_utc_datetime``, ``new_uuid``) must be identical between the replays; a session
replays only when it starts over, so it sees the same non-replaying observations, and fewer
replaying ones.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import azure.durable_functions as df
import pytest
from azure.durable_functions.models.history.HistoryEventType import HistoryEventType
from dateutil.parser import parse as dateutil_parse

from durable_host.core import history as h
from durable_host.core import orchestration as o
from durable_host.core import replay
from durable_host.core.sessions import Session
from tests.unit.durable_host.driver import Driver

SEEN: list[Any] = []  # what orchestrator code observed, in order


def observe(context: df.DurableOrchestrationContext, label: str) -> None:
    SEEN.append(
        (label, context.is_replaying, context.current_utc_datetime.isoformat(), context.new_uuid())
    )


def chain(context):
    observe(context, "start")
    results = []
    for city in ("Tokyo", "Seattle", "London"):
        results.append((yield context.call_activity("say", city)))
        observe(context, city)
    return results


def rerun_adapter(context):
    """A plain function returning a generator that expects to be re-run every episode, as
    the SDK's OpenAI Agents adapter does: it yields what history already answered, then the
    one new task, and ends; the next episode's run from the start finds its result."""

    def steps():
        done = sum(1 for e in context.histories if e.event_type == HistoryEventType.TASK_COMPLETED)
        for i in range(done):
            yield context.call_activity("say", i)
        if done < 2:
            yield context.call_activity("say", done)
            return None
        return f"finished after {done}"

    return steps()


def history_reader(context):
    """A generator function deciding by ``context.histories``: by events a compact history
    leaves out (TaskScheduled) and by what a replay shows a past step (the whole history),
    which a session's step saw only up to its own episode."""
    for step in range(3):
        kinds = [e.event_type for e in context.histories]
        scheduled = kinds.count(HistoryEventType.TASK_SCHEDULED)
        yield context.call_activity("say", f"{step}: {len(kinds)} events, {scheduled} scheduled")
    return len(context.histories)


def run_history_reader(d: Driver) -> None:
    d.start()
    for task_id in range(3):
        tick(d)
        d.complete(task_id, "ok")


def run_rerun_adapter(d: Driver) -> None:
    d.start()
    for task_id in range(2):
        tick(d)
        d.complete(task_id, task_id)


def fan_out(context):
    values = yield context.task_all([context.call_activity("double", i) for i in range(4)])
    observe(context, "joined")
    return sum(values)


def retrying(context):
    options = df.RetryOptions(first_retry_interval_in_milliseconds=500, max_number_of_attempts=3)
    value = yield context.call_activity_with_retry("flaky", options, "k")
    observe(context, "retried")
    return value


def racing(context):
    timer = context.create_timer(context.current_utc_datetime + timedelta(minutes=5))
    event = context.wait_for_external_event("approve")
    winner = yield context.task_any([event, timer])
    observe(context, "raced")
    if winner == event:
        timer.cancel()
        return event.result
    return "timeout"


def with_child(context):
    child = yield context.call_sub_orchestrator("child", {"n": 1}, "child-1")
    observe(context, "child")
    return child


def entity_user(context):
    entity = df.EntityId("counter", "k")
    context.signal_entity(entity, "add", 2)
    value = yield context.call_entity(entity, "get")
    observe(context, "entity")
    context.set_custom_status({"value": value})
    return value


def restarting(context):
    n = int(context.get_input())
    observe(context, f"gen {n}")
    if n >= 1:
        return n
    yield context.call_activity("echo", n)
    context.continue_as_new(n + 1)


def buffered_twice(context):
    yield context.call_activity("echo", None)
    first = yield context.wait_for_external_event("go")
    second = yield context.wait_for_external_event("go")
    observe(context, "both")
    return [first, second]


def long_sleep(context):
    yield context.create_timer(context.current_utc_datetime + timedelta(days=7))
    observe(context, "woke")
    return "woke"


def failing(context):
    yield context.call_activity("echo", 1)
    try:
        yield context.call_activity("boom", 2)
    except Exception as exc:
        observe(context, "caught")
        raise ValueError("gave up") from exc


def progress(context):
    for step in range(3):
        context.set_custom_status({"step": step, "id": context.new_uuid()})
        yield context.call_activity("work", step)
    observe(context, "done")
    return context.custom_status


def tick(d: Driver, seconds: float = 1.5) -> None:
    """Advance the driver's clock by a non-round amount, so microseconds matter."""
    d.now = h.format_time(h.parse_time(d.now) + timedelta(seconds=seconds, microseconds=123))


def run_chain(d: Driver) -> None:
    d.start("x")
    for task_id in range(3):
        tick(d)
        d.complete(task_id, f"hello {task_id}")


def run_fan_out(d: Driver) -> None:
    d.start()
    for task_id in (3, 1, 0, 2):
        tick(d)
        d.complete(task_id, task_id * 2)


def run_retrying(d: Driver) -> None:
    d.start()
    tick(d)
    d.fail(0, "one")
    tick(d)
    d.fire(1)
    tick(d)
    d.fail(2, "two")
    tick(d)
    d.fire(3)
    tick(d)
    d.complete(4, "third time")


def run_racing(d: Driver) -> None:
    d.start()
    tick(d)
    d.raise_event("other", 1)
    tick(d)
    d.raise_event("approve", {"by": "ann"})


def run_child(d: Driver) -> None:
    d.start()
    tick(d)
    d.deliver(
        {
            "kind": "event",
            "event": h.sub_orchestration_completed(0, d.now, '{"ok":1}'),
            "execution_id": d.execution_id,
        }
    )


def run_entity(d: Driver) -> None:
    d.start()
    call = json.loads(
        next(
            e
            for e in d.history
            if e["EventType"] == h.EventType.EVENT_SENT and "parent" in e["Input"]
        )["Input"]
    )
    tick(d)
    response = json.dumps({"result": json.dumps(7)})
    d.deliver({"kind": "event", "event": h.event_raised(d.now, call["id"], response)})


def run_restarting(d: Driver) -> None:
    d.start(0)
    tick(d)
    d.complete(0, 0)
    start = [m for m in d.messages if m.payload["kind"] == "start"][-1]
    tick(d)
    d.deliver(start.payload)


def run_buffered(d: Driver) -> None:
    d.start()
    tick(d)
    d.raise_event("go", 1)
    tick(d)
    d.complete(0, None)
    tick(d)
    d.raise_event("go", 2)


def run_long_sleep(d: Driver) -> None:
    d.start()
    for timer_id in range(3):
        d.now = [e for e in d.history if e["EventType"] == h.EventType.TIMER_CREATED][-1]["FireAt"]
        d.fire(timer_id)


def run_failing(d: Driver) -> None:
    d.start()
    tick(d)
    d.complete(0, 1)
    tick(d)
    d.fail(1, "bad", "boom")


def run_progress(d: Driver) -> None:
    d.start()
    tick(d)
    d.complete(0, None)
    tick(d)
    d.deliver({"kind": "suspend", "reason": "pause"})
    result = {
        "kind": "event",
        "event": h.task_completed(1, d.now, "null"),
        "execution_id": d.execution_id,
    }
    assert d.deliver(result).consumed == []  # held while suspended: the inbox keeps it
    tick(d)
    d.deliver({"kind": "resume", "reason": "go"}, result)
    tick(d)
    d.complete(2, None)


SCENARIOS: dict[str, tuple[Callable[..., Any], Callable[[Driver], None]]] = {
    "chain": (chain, run_chain),
    "fan_out": (fan_out, run_fan_out),
    "rerun_adapter": (rerun_adapter, run_rerun_adapter),
    "history_reader": (history_reader, run_history_reader),
    "retry": (retrying, run_retrying),
    "timer_and_event": (racing, run_racing),
    "sub_orchestration": (with_child, run_child),
    "entity_call_and_signal": (entity_user, run_entity),
    "continue_as_new": (restarting, run_restarting),
    "buffered_event_507": (buffered_twice, run_buffered),
    "long_timer": (long_sleep, run_long_sleep),
    "failure": (failing, run_failing),
    "custom_status_suspend_resume": (progress, run_progress),
}


READERS = {"rerun_adapter", "history_reader"}  # scenarios whose code reads context.histories


class RecordingSession(Session):
    """Logs the SDK's whole answer after every episode (a continued one serialises only the
    new actions; its whole answer is what a replay would have answered)."""

    def __init__(self, calls: list[tuple[str, str]]):
        super().__init__(verify_every=0)  # scheduled full replays: test_incremental_replay
        self.calls = calls

    def _record(self, request: str) -> None:
        text, raised = self.full_answer()
        self.calls.append((request, f"raised: {text}" if raised else text))

    def advance(self, events: list[dict[str, Any]], first: int) -> str:
        try:
            return super().advance(events, first)
        finally:
            self._record(json.dumps({"history": replay.sdk_history(events)}))

    def rebuild(self, handle: Callable[[str], str], key: str, request: dict[str, Any]) -> str:
        try:
            return super().rebuild(handle, key, request)
        finally:
            self._record(json.dumps(request))


@pytest.fixture
def fast_replay(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., None]]:
    """Switch fast replay (and a session) on or off for ``run_episode`` and the SDK's parser."""

    def switch(on: bool, session: Session | None = None, text: bool = False) -> None:
        original = (
            o.run_episode.__wrapped__ if hasattr(o.run_episode, "__wrapped__") else o.run_episode
        )
        kept: list[replay.HistoryText] = []

        def run(*args: Any, **kwargs: Any) -> o.Episode:
            extra: dict[str, Any] = {}
            if text:
                # As the engine keeps it: grown by appending while the history only grows.
                history = args[1].history
                if not kept or kept[0].covers > len(history):
                    kept[:] = [replay.HistoryText()]
                kept[0].extend(history[kept[0].covers :])
                extra["history_text"] = kept[0]
            return original(*args, **{**kwargs, "compact": on, "session": session, **extra})

        run.__wrapped__ = original  # type: ignore[attr-defined]
        monkeypatch.setattr(o, "run_episode", run)
        assert replay.install(on) is on

    yield switch
    replay.install(False)


def recorded(
    fn: Callable[..., Any], calls: list[tuple[str, str]] | None = None
) -> tuple[Callable[[str], str], list[tuple[str, str]]]:
    """The SDK handle of ``fn`` and a log of its (request, raw answer) per call (``calls``,
    shared with a RecordingSession); a session still finds the orchestrator behind it."""
    handle: Any = df.Orchestrator.create(fn)
    calls = [] if calls is None else calls

    def wrapped(request: str) -> str:
        try:
            answer = handle(request)
        except Exception as exc:  # noqa: BLE001 - the SDK reports orchestrator failures by raising
            answer = f"raised: {exc}"
        calls.append((request, answer))
        if answer.startswith("raised: "):
            raise Exception(answer.removeprefix("raised: "))  # noqa: TRY002 - as the SDK raises
        return answer

    wrapped.orchestrator_function = handle.orchestrator_function  # type: ignore[attr-defined]
    return wrapped, calls


def play(name: str, mode: str, switch: Callable[..., None]) -> dict[str, Any]:
    """Run a scenario with ``mode`` plain, fast (filtered history, fast timestamps) or session."""
    fn, script = SCENARIOS[name]
    SEEN.clear()
    if mode == "session":
        session = RecordingSession([])
        switch(True, session)
        handle, calls = recorded(fn, session.calls)  # a plain replay instead is logged too
    else:
        session = None
        switch(mode in ("fast", "text"), text=mode == "text")
        handle, calls = recorded(fn)
    d = Driver(handle, name=name)
    episodes: list[o.Episode] = []
    deliver = d.deliver
    used: list[tuple[str, str]] = []  # the answer each episode decided by: its last call

    def keep(*messages: dict[str, Any]) -> o.Episode:
        before = len(calls)
        episode = deliver(*messages)
        episodes.append(episode)
        if len(calls) > before:
            used.append(calls[-1])
        return episode

    d.deliver = keep  # type: ignore[method-assign]
    script(d)
    return {
        "answers": [answer for _, answer in used],
        "calls": len(calls),
        "raw": [request for request, _ in calls],
        "requests": [json.loads(request)["history"] for request, _ in calls],
        "seen": list(SEEN),
        "episodes": [
            (e.events, e.outbox, e.status, e.output_json, e.custom_status_json) for e in episodes
        ],
        "history": d.history,
        "status": d.status,
        "output": d.output,
        "continued": session.continued if session else 0,
    }


@pytest.mark.filterwarnings("ignore:Potential duplicate Task completion")
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_fast_replay_and_sessions_compute_what_the_plain_replay_computes(name, fast_replay):
    plain = play(name, "plain", fast_replay)
    fast = play(name, "fast", fast_replay)
    live = play(name, "session", fast_replay)

    assert plain["status"] in ("Completed", "Failed", "ContinuedAsNew")
    for other in (fast, live):
        assert other["answers"] == plain["answers"]  # actions, output, custom status, errors
        assert other["episodes"] == plain["episodes"]
        assert other["status"] == plain["status"] and other["output"] == plain["output"]
    if name in READERS:
        # Decided again by a plain replay after the read: the compact answers are discarded.
        assert fast["calls"] > plain["calls"] and live["calls"] > plain["calls"]
    else:
        assert fast["calls"] == plain["calls"]  # nothing read, nothing decided twice
    assert fast["seen"] == plain["seen"]  # is_replaying, current_utc_datetime, new_uuid
    first_time = [seen for seen in plain["seen"] if not seen[1]]
    assert [seen for seen in live["seen"] if not seen[1]] == first_time
    assert len(live["seen"]) <= len(plain["seen"])  # a session replays only to start over


@pytest.mark.filterwarnings("ignore:Potential duplicate Task completion")
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_the_kept_history_text_hands_the_sdk_the_same_bytes(name, fast_replay):
    fast = play(name, "fast", fast_replay)
    text = play(name, "text", fast_replay)

    assert text["raw"] == fast["raw"]
    assert text["episodes"] == fast["episodes"] and text["seen"] == fast["seen"]


def test_history_text_is_the_json_of_the_events_the_sdk_reads():
    events = [
        h.orchestrator_started("2024-01-01T00:00:00.000000Z"),
        h.event_sent(0, "t", "@c@k", "add", json.dumps({"op": "add", "id": "a", "signal": True})),
        h.event_sent(1, "t", "@c@k", "get", json.dumps({"op": "get", "id": "b", "parent": "i"})),
        h.generic_event("2024-01-01T00:00:00.000000Z", "x"),
    ]
    kept = replay.HistoryText()
    assert kept.text() == ""
    for count, event in enumerate(events, 1):
        kept.extend([event])
        assert kept.covers == count
        assert f"[{kept.text()}]" == json.dumps(replay.sdk_history(events[:count]))
    assert f"[{kept.text(events[:2])}]" == json.dumps(replay.sdk_history(events + events[:2]))
    request = o.wire.encode_orchestration_request_text("i", kept.text(), '{"a": 1}', "p")
    assert request == o.wire.encode_orchestration_request(
        "i", replay.sdk_history(events), '{"a": 1}', "p"
    )


def test_an_orchestrator_that_relies_on_re_running_is_replayed_in_full(fast_replay):
    plain = play("rerun_adapter", "plain", fast_replay)
    live = play("rerun_adapter", "session", fast_replay)

    assert plain["status"] == "Completed" and plain["output"] == "finished after 2"
    assert live["output"] == plain["output"] and live["continued"] == 0


def test_a_verifying_session_replays_every_nth_episode_with_the_same_results(fast_replay):
    plain = play("chain", "plain", fast_replay)
    calls: list[tuple[str, str]] = []
    session = RecordingSession(calls)
    session.verify_every = 2
    fast_replay(True, session)
    d = Driver(df.Orchestrator.create(chain), name="chain")
    run_chain(d)

    assert (d.status, d.output) == (plain["status"], plain["output"])
    assert [answer for _, answer in calls] == plain["answers"]
    assert session.continued == 2 and session.checks == 1  # the second result: a full replay


def changed_chain(context):
    """``chain`` after a deployment that renamed its activity."""
    results = []
    for city in ("Tokyo", "Seattle", "London"):
        results.append((yield context.call_activity("greet", city)))
    return results


def test_a_changed_orchestrator_is_caught_when_its_session_is_rebuilt(fast_replay):
    fast_replay(True, Session())
    d = Driver(df.Orchestrator.create(chain), name="chain")
    d.start("x")
    tick(d)
    d.complete(0, "hello 0")
    # Evicted (or the host restarted with new code): a new session rebuilds by a full replay.
    fast_replay(True, Session())
    d.handle = df.Orchestrator.create(changed_chain)
    tick(d)
    d.complete(1, "hello 1")

    assert d.status == "Failed"
    assert "Non-Deterministic workflow detected" in str(d.output)
    assert "'say'" in str(d.output) and "'greet'" in str(d.output)


def test_a_session_serves_later_episodes_without_a_replay(fast_replay):
    live = play("chain", "session", fast_replay)

    assert live["continued"] == 3  # the three activity results; only the start replayed
    assert all(not replaying for _, replaying, _, _ in live["seen"])


def test_the_fast_replay_hands_the_sdk_fewer_events(fast_replay):
    plain = play("chain", "plain", fast_replay)
    fast = play("chain", "fast", fast_replay)

    last_plain, last_fast = plain["requests"][-1], fast["requests"][-1]
    assert len(last_fast) < len(last_plain) * 0.6
    kinds = {e["EventType"] for e in last_fast}
    assert kinds <= {
        h.EventType.ORCHESTRATOR_STARTED,
        h.EventType.EXECUTION_STARTED,
        h.EventType.TASK_COMPLETED,
    }
    assert last_fast[0]["EventType"] == h.EventType.ORCHESTRATOR_STARTED
    assert last_fast[1]["EventType"] == h.EventType.EXECUTION_STARTED


def test_signal_event_sent_is_dropped_but_a_call_is_kept():
    signal = h.event_sent(
        0, "t", "@counter@k", "add", json.dumps({"op": "add", "id": "a", "signal": True})
    )
    call = h.event_sent(
        1, "t", "@counter@k", "get", json.dumps({"op": "get", "id": "b", "parent": "i1"})
    )

    assert replay.sdk_history([signal, call]) == [call]


def canonical_times(count: int) -> Iterator[str]:
    rng = random.Random(7)
    start = datetime(1971, 1, 1, tzinfo=UTC)
    for _ in range(count):
        moment = start + timedelta(
            seconds=rng.randrange(0, 2_000_000_000), microseconds=rng.randrange(0, 1_000_000)
        )
        yield h.format_time(moment)


def test_fast_timestamps_equal_dateutil_values_and_zone_kind():
    assert replay.install(True)
    try:
        tzinfo = dateutil_parse("2000-01-01T00:00:00.000000Z").tzinfo
        for text in [
            *canonical_times(2000),
            "2024-02-29T23:59:59.999999Z",
            "2024-01-01T00:00:00.000000Z",
        ]:
            fast = replay.fast_timestamp(text, dateutil_parse, tzinfo)
            slow = dateutil_parse(text)
            assert fast == slow and fast.utcoffset() == slow.utcoffset()
            assert type(fast.tzinfo) is type(slow.tzinfo) and str(fast) == str(slow)
    finally:
        replay.install(False)


@pytest.mark.parametrize(
    "text",
    [
        "2024-01-01T00:00:05.1234567Z",
        "2024-01-01T00:00:05Z",
        "2024-01-01T00:00:05.12+02:00",
        "Jan 1 2024",
    ],
)
def test_other_timestamp_forms_still_go_to_dateutil(text):
    calls = []

    def fallback(value: str) -> datetime:
        calls.append(value)
        return dateutil_parse(value)

    assert replay.fast_timestamp(text, fallback, UTC) == dateutil_parse(text)
    assert calls == [text]


def test_history_cache_answers_only_for_the_same_key_and_stays_bounded():
    cache = replay.HistoryCache(max_events=40)
    cache.put("a", ("e1", "t1"), [{"n": i} for i in range(10)])

    assert cache.get("a", ("e1", "t1")) is not None
    assert cache.get("a", ("e1", "t2")) is None  # changed elsewhere: read the store again
    assert cache.get("a", ("e1", "t1")) is None  # and the stale entry is gone
    for i in range(10):
        cache.put(f"i{i}", ("e", "t"), [{"n": 0}] * 8)
    assert cache.size <= 40 and len(cache) == 5
    cache.put("huge", ("e", "t"), [{"n": 0}] * 11)  # over a quarter of the bound: not kept
    assert cache.get("huge", ("e", "t")) is None
    assert len(cache) == 5  # and nobody was pushed out for it
    roomy = replay.HistoryCache(max_events=40)
    roomy.put("small", ("e", "t"), [{"n": 0}] * 8)
    roomy.put("long", ("e", "t"), [{"n": 0}] * 30)  # over a quarter, but it fits: kept
    assert roomy.get("long", ("e", "t")) is not None and roomy.get("small", ("e", "t"))
    roomy.put("longer", ("e", "t"), [{"n": 0}] * 41)  # over the bound: never kept
    assert roomy.get("longer", ("e", "t")) is None and len(roomy) == 2
