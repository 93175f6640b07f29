"""Episodes of short histories run on the event loop, longer ones in a worker thread
(``DURABLE_HOST_INLINE_EVENTS``), with the same results either way."""

from __future__ import annotations

import asyncio
import contextvars
import json
import threading
from pathlib import Path

import azure.durable_functions as df
import azure.functions as func
import pytest

from durable_host.core import replay
from durable_host.engine import loops as engine_mod
from durable_host.engine.client import DurableClient
from durable_host.engine.loops import Engine
from durable_host.functions import config as config_mod
from durable_host.functions import loader
from durable_host.ops.settings import ConfigError
from durable_host.store.sqlite.store import SqliteStore

app = df.DFApp(http_auth_level=func.AuthLevel.ANONYMOUS)
THREADS: list[tuple[int, str]] = []  # (step, the thread whose episode first ran it)
MARK: contextvars.ContextVar[str] = contextvars.ContextVar("mark", default="unset")


@app.activity_trigger(input_name="value")
def echo(value):
    return value


@app.orchestration_trigger(context_name="context")
def counted(context: df.DurableOrchestrationContext):
    """``steps`` activities; notes which thread ran each step first (not its replays)."""
    total = 0
    for step in range(context.get_input()["steps"]):
        if not context.is_replaying:
            THREADS.append((step, threading.current_thread().name))
        MARK.set("set by the orchestrator")  # must not leak into the host's own context
        total += yield context.call_activity("echo", 1)
    return total


@app.orchestration_trigger(context_name="context")
def runs_a_loop(context: df.DurableOrchestrationContext):
    """Runs an event loop of its own, as an agent runner's ``run_sync`` does: it needs a
    thread with no loop running."""

    async def double(n: int) -> int:
        return 2 * n

    first = yield context.call_activity("echo", 1)
    return asyncio.run(double(first))


def _plain(context: df.DurableOrchestrationContext):
    THREADS.append((0, threading.current_thread().name))
    yield context.call_activity("echo", 1)
    return "plain"


@app.orchestration_trigger(context_name="context")
def adapted(context: df.DurableOrchestrationContext):
    """Not a generator function: it returns one built elsewhere (an adapter's shape)."""
    return _plain(context)


INDEX = loader.index_functions(app)


def run_engine(
    tmp_path: Path,
    steps: int,
    inline_events: int | None,
    name: str = "counted",
    runs: int = 1,
    sessions: bool = False,
) -> tuple[str, str, dict[str, int]]:
    """Run ``name`` (``counted`` with ``steps``) to completion ``runs`` times, one instance
    after the other; the last one's output, the host's ``MARK`` and the engine's counters."""

    async def run() -> tuple[str, str, dict[str, int]]:
        store = SqliteStore(tmp_path / "hub.db")
        await store.open()
        engine = Engine(INDEX, store, config_mod.HostConfig(app_dir=tmp_path), fast_replay=True)
        if inline_events is not None:
            engine.inline_events = inline_events
        engine.sessions = sessions  # a full replay every episode unless asked
        await engine.start()
        try:
            for n in range(runs):
                output = await finished(engine, store, name, f"i{n}", steps)
            return output, MARK.get(), dict(engine.stats)
        finally:
            await engine.stop(1.0)
            await store.close()
            replay.install(False)

    return asyncio.run(run())


async def finished(
    engine: Engine, store: SqliteStore, name: str, instance_id: str, steps: int
) -> str:
    await DurableClient(engine).start(name, instance_id, json.dumps({"steps": steps}))
    for _ in range(2000):
        record = await store.get_instance(instance_id)
        if record is not None and record.status in ("Completed", "Failed"):
            return str(record.output_json)
        await asyncio.sleep(0.01)
    raise AssertionError("the orchestration did not finish in 20 s")


def test_short_histories_run_on_the_loop_and_longer_ones_in_a_worker_thread(tmp_path):
    THREADS.clear()
    output, mark, stats = run_engine(tmp_path, steps=12, inline_events=16)

    assert output == "12"
    assert mark == "unset"  # the episode ran in a copy of the loop's context
    assert "episodes_decided_again" not in stats
    loop_thread = threading.current_thread().name  # asyncio.run runs the loop here
    # Each step adds about four events to the history: the first steps meet a history of
    # at most 16 events, the last ones a longer one.
    short = {name for step, name in THREADS if step < 3}
    longer = {name for step, name in THREADS if step > 6}
    assert short == {loop_thread}
    assert longer and loop_thread not in longer


def test_a_live_session_that_continues_runs_on_the_loop_at_any_history_length(tmp_path):
    """Its episode does the new events' work, not the history's; the full replays on
    schedule (whenever the history has doubled) go to a thread."""
    THREADS.clear()
    output, _, stats = run_engine(tmp_path, steps=40, inline_events=16, sessions=True)

    assert output == "40"
    loop_thread = threading.current_thread().name
    longer = [name for step, name in THREADS if step > 6]
    assert loop_thread in longer  # continued episodes
    assert any(name != loop_thread for name in longer)  # the scheduled full replays
    assert stats["session_steps"] > 0


def test_zero_runs_every_episode_in_a_worker_thread(tmp_path):
    THREADS.clear()
    output, _, _ = run_engine(tmp_path, steps=3, inline_events=0)

    assert output == "3"
    assert threading.current_thread().name not in {name for _, name in THREADS}


def test_code_that_runs_its_own_event_loop_gets_the_answer_a_thread_gives(tmp_path):
    # On the loop asyncio.run fails ("cannot be called from a running event loop"): the
    # episode is decided again in a worker thread, where it runs.
    output, _, stats = run_engine(tmp_path, steps=0, inline_events=64, name="runs_a_loop")

    assert output == "2"
    assert stats["episodes_decided_again"] == 1  # the last episode, the one that runs it


def test_code_that_needed_a_thread_once_goes_to_a_thread_from_then_on(tmp_path):
    # The function failed on the loop and ran in a thread: its later episodes, this
    # instance's and every other's, are not tried on the loop again (nor paid for twice).
    output, _, stats = run_engine(tmp_path, steps=0, inline_events=64, name="runs_a_loop", runs=3)

    assert output == "2"
    assert stats["episodes_decided_again"] == 1


def test_an_orchestrator_that_is_not_a_generator_function_runs_in_a_thread(tmp_path):
    THREADS.clear()
    output, _, _ = run_engine(tmp_path, steps=0, inline_events=64, name="adapted")

    assert output == '"plain"'
    assert THREADS and threading.current_thread().name not in {name for _, name in THREADS}


@pytest.mark.parametrize(
    ("value", "expected"), [(None, engine_mod.INLINE_EVENTS), ("0", 0), ("500", 500)]
)
def test_the_inline_bound_is_a_whole_number_setting(tmp_path, monkeypatch, value, expected):
    if value is None:
        monkeypatch.delenv("DURABLE_HOST_INLINE_EVENTS", raising=False)
    else:
        monkeypatch.setenv("DURABLE_HOST_INLINE_EVENTS", value)
    engine = Engine(INDEX, SqliteStore(tmp_path / "t.db"), config_mod.HostConfig(app_dir=tmp_path))
    assert engine.inline_events == expected


@pytest.mark.parametrize("value", ["-1", "many", "6.5"])
def test_an_unreadable_inline_bound_is_refused_naming_it(tmp_path, monkeypatch, value):
    monkeypatch.setenv("DURABLE_HOST_INLINE_EVENTS", value)
    with pytest.raises(ConfigError, match="DURABLE_HOST_INLINE_EVENTS="):
        Engine(INDEX, SqliteStore(tmp_path / "t.db"), config_mod.HostConfig(app_dir=tmp_path))
