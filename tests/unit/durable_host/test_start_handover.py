"""A start hands its message to the instance's first episode (``Engine.started``).

On the embedded store a start counts the first episode's attempt in its own transaction and
names the start message's inbox id; the first episode then neither reads the inbox, nor
counts, nor reads the (empty) history. It falls back to reading and counting whenever it
cannot be sure the message is still the instance's only news: a write to the instance since
the start, or a message the engine was told of.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import azure.durable_functions as df
import azure.functions as func

from durable_host import config as config_mod
from durable_host import history as h
from durable_host import loader, replay, sdk_codec
from durable_host.client import DurableClient
from durable_host.engine import Engine
from durable_host.records import MessageKind
from durable_host.store.sqlite import SqliteStore

app = df.DFApp(http_auth_level=func.AuthLevel.ANONYMOUS)


@app.activity_trigger(input_name="value")
def echo(value):
    return value


@app.orchestration_trigger(context_name="context")
def steps(context: df.DurableOrchestrationContext):
    total = 0
    for _ in range(context.get_input()["steps"]):
        total += yield context.call_activity("echo", 1)
    return total


@app.orchestration_trigger(context_name="context")
def waits(context: df.DurableOrchestrationContext):
    value = yield context.wait_for_external_event("go")
    return value


INDEX = loader.index_functions(app)
COUNTED = ("fetch_messages", "begin_attempt", "get_history")


def counting(store: SqliteStore) -> Counter[str]:
    """Count the calls the first episode must not need."""
    calls: Counter[str] = Counter()
    for name in COUNTED:
        original = getattr(store, name)

        def wrapped(*args: Any, _name: str = name, _original: Any = original) -> Any:
            calls[_name] += 1
            return _original(*args)

        setattr(store, name, wrapped)
    return calls


def run(
    tmp_path: Path,
    body: Callable[[Engine, SqliteStore, DurableClient], Awaitable[Any]],
    *,
    workers: bool = True,
    poison_attempts: int | None = None,
) -> Any:
    async def main() -> Any:
        store = SqliteStore(tmp_path / "hub.db")
        await store.open()
        engine = Engine(
            INDEX,
            store,
            config_mod.HostConfig(app_dir=tmp_path),
            fast_replay=True,
            poison_attempts=poison_attempts,
        )
        if workers:
            await engine.start()
        else:  # the test runs episodes itself (``Engine._process``), as a worker would
            replay.install(True)
            sdk_codec.install(True)
        try:
            return await body(engine, store, DurableClient(engine))
        finally:
            await engine.stop(1.0)
            await store.close()
            replay.install(False)

    return asyncio.run(main())


async def finished(store: SqliteStore, instance_id: str) -> Any:
    for _ in range(2000):
        record = await store.get_instance(instance_id)
        if record is not None and record.status in ("Completed", "Failed", "Terminated"):
            return record
        await asyncio.sleep(0.01)
    raise AssertionError("the orchestration did not finish in 20 s")


def test_a_start_and_its_steps_read_no_inbox_count_no_attempt_and_read_no_history(tmp_path):
    async def body(engine: Engine, store: SqliteStore, client: DurableClient) -> Any:
        calls = counting(store)
        await client.start("steps", "i", json.dumps({"steps": 3}))
        record = await finished(store, "i")
        return record, calls

    record, calls = run(tmp_path, body)

    assert (record.status, record.output_json) == ("Completed", "3"), record.output_json
    assert calls == Counter()  # every episode took what it needed from memory


def test_with_a_single_attempt_allowed_the_first_episode_reads_and_counts(tmp_path):
    # An attempt counted in advance and a crash before the episode would quarantine an
    # instance that never ran: the start counts nothing, its episode counts for itself.
    async def body(engine: Engine, store: SqliteStore, client: DurableClient) -> Any:
        calls = counting(store)
        await client.start("steps", "i", json.dumps({"steps": 1}))
        record = await finished(store, "i")
        return record, calls

    record, calls = run(tmp_path, body, poison_attempts=1)

    assert record.status == "Completed"
    assert calls["fetch_messages"] == 1  # the start message, read
    assert calls["begin_attempt"] == 2  # and each of its two episodes counted for itself


def test_a_write_to_the_instance_after_its_start_makes_the_first_episode_read_the_inbox(
    tmp_path,
):
    async def body(engine: Engine, store: SqliteStore, client: DurableClient) -> Any:
        await client.start("waits", "i", None)
        # A message (and a status write) the engine was not told of, before the first
        # episode: the handed start is no longer all there is to know.
        event = {"kind": MessageKind.EVENT, "event": h.event_raised(engine.now(), "go", '"ready"')}
        await store.send("i", event, engine.now(), status="Pending")
        calls = counting(store)
        await engine._process("i")  # the episode a worker would run
        return await store.get_instance("i"), calls

    record, calls = run(tmp_path, body, workers=False)

    assert calls["fetch_messages"] == 1  # read, not taken from memory
    assert (record.status, record.output_json) == ("Completed", '"ready"')


def test_a_message_the_engine_was_told_of_makes_the_first_episode_read_the_inbox(tmp_path):
    async def body(engine: Engine, store: SqliteStore, client: DurableClient) -> Any:
        await client.start("waits", "i", None)
        await client.raise_event("i", "go", json.dumps("told"))
        calls = counting(store)
        await engine._process("i")  # the episode a worker would run
        return await store.get_instance("i"), calls

    record, calls = run(tmp_path, body, workers=False)

    assert calls["fetch_messages"] == 1
    assert (record.status, record.output_json) == ("Completed", '"told"')
