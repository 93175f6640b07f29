"""``episode_record``: the record the engine reads before an episode is always what
``get_instance`` reads, whichever write changed the row last (both stores); on SQLite it
comes from memory after the store's own episode commits, without a trip to the store thread.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from durable_host.core.orchestration import Episode
from durable_host.core.records import Completion
from durable_host.functions.config import NON_RUNNING
from durable_host.store.base import StoreLostError
from durable_host.store.sqlite import tx as sqlite_tx
from durable_host.store.sqlite.store import SqliteStore
from tests.store.contract_support import T0, at, event, record, start_message
from tests.store.test_step_commit import result, scheduled


async def same(store: Any, instance_id: str) -> Any:
    kept, stored = await store.episode_record(instance_id), await store.get_instance(instance_id)
    assert kept == stored
    return kept


def test_the_episode_record_follows_every_kind_of_write(run_store) -> None:
    async def body(store: Any) -> None:
        assert await same(store, "a") is None  # no such instance yet
        [work] = await scheduled(store, "a", 1)
        assert (await same(store, "a")).status == "Running"

        episode = Episode(events=[event(7)], status="Completed", output_json='"done"')
        await store.commit_step(
            "a", [Completion(work.work_id, result(0), consumed=True)], episode, at(1)
        )
        done = await same(store, "a")
        assert (done.status, done.output_json, done.updated_at) == ("Completed", '"done"', at(1))

        # The API's writes: a status sent with a message, a restart, a purge.
        await store.send("a", {"kind": "terminate", "reason": "x"}, at(2), status="Terminated")
        assert (await same(store, "a")).status == "Terminated"
        await store.create_instance(record("a", at(3)), start_message(), NON_RUNNING)
        assert (await same(store, "a")).status == "Pending"
        await store.purge("a")
        assert await same(store, "a") is None

    run_store(body)


def test_a_kept_record_is_a_copy_the_engine_may_keep(run_store) -> None:
    async def body(store: Any) -> None:
        await scheduled(store, "a", 1)
        first = await store.episode_record("a")
        first.status = "Scribbled"

        assert (await store.episode_record("a")).status == "Running"

    run_store(body)


def sqlite_run(tmp_path, body) -> None:
    """``body(store, trips)`` on a SQLite store whose every trip to its thread for a read is
    noted in ``trips``."""

    async def main() -> None:
        store = SqliteStore(tmp_path / "hub.db")
        await store.open()
        trips: list[str] = []
        run = store._run

        async def counted(fn: Any) -> Any:
            trips.append("read")
            return await run(fn)

        store._run = counted  # type: ignore[method-assign]
        try:
            await body(store, trips)
        finally:
            await store.close()

    asyncio.run(main())


def test_after_its_own_commit_sqlite_answers_from_memory_and_reads_after_other_writes(
    tmp_path,
) -> None:
    async def body(store: SqliteStore, trips: list[str]) -> None:
        [work] = await scheduled(store, "a", 1)
        trips.clear()
        assert (await store.episode_record("a")).status == "Running"
        assert trips == []  # the commit kept the row it wrote

        await store.send("a", {"kind": "suspend"}, at(1), status="Suspended")
        assert (await store.episode_record("a")).status == "Suspended"
        assert trips == ["read"]  # the trigger dropped it: read once, then kept
        await store.episode_record("a")
        assert trips == ["read"]

        episode = Episode(events=[event(7)], status="Completed")
        await store.commit_step(
            "a", [Completion(work.work_id, result(0), consumed=True)], episode, at(2)
        )
        assert (await store.episode_record("a")).status == "Completed"
        assert trips == ["read"]

    sqlite_run(tmp_path, body)


def test_a_start_keeps_the_row_its_first_episode_reads(tmp_path) -> None:
    async def body(store: SqliteStore, trips: list[str]) -> None:
        await store.create_instance(record("s", T0), start_message(), NON_RUNNING)

        assert (await store.episode_record("s")).status == "Pending"
        assert trips == []

    sqlite_run(tmp_path, body)


def test_sqlite_keeps_a_bounded_number_of_records(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(sqlite_tx, "MAX_EPISODE_RECORDS", 3)

    async def body(store: SqliteStore, trips: list[str]) -> None:
        for n in range(6):
            await scheduled(store, f"i{n}", 1)
        trips.clear()
        for n in (5, 4, 3):
            await store.episode_record(f"i{n}")
        assert trips == []  # the newest three are kept
        assert (await store.episode_record("i0")).status == "Running"
        assert trips == ["read"]  # the oldest went
        assert len(store._records) == 3

    sqlite_run(tmp_path, body)


def test_a_lost_sqlite_store_answers_nothing_from_memory(tmp_path) -> None:
    async def body(store: SqliteStore, trips: list[str]) -> None:
        await scheduled(store, "a", 1)
        store._lose(StoreLostError("taken over"))

        with pytest.raises(StoreLostError, match="taken over"):
            await store.episode_record("a")

    sqlite_run(tmp_path, body)


def test_the_start_time_is_unchanged_by_the_kept_record(run_store) -> None:
    # The record the first episode reads is the one create_instance stored.
    async def body(store: Any) -> None:
        await store.create_instance(record("b", T0), start_message(), NON_RUNNING)
        kept = await same(store, "b")
        assert (kept.status, kept.created_at) == ("Pending", T0)

    run_store(body)
