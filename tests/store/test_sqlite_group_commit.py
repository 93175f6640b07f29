"""SQLite group commit: writes queued together share one transaction and one fsync, and
each still succeeds or fails on its own."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from durable_host.functions.config import NON_RUNNING
from durable_host.store.base import InstanceExistsError
from durable_host.store.sqlite.store import SqliteStore
from tests.store.contract_support import T0, raised, record, start_message, started


def run(tmp_path: Path, body: Any) -> None:
    async def main() -> None:
        store = SqliteStore(tmp_path / "hub.db")
        await store.open()
        try:
            await body(store)
        finally:
            await store.close()

    asyncio.run(main())


def test_concurrent_writes_share_commits_and_each_fails_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    groups: list[int] = []
    group = SqliteStore._group

    def counted(self: SqliteStore, db: Any, batch: list[Any]) -> None:
        groups.append(len(batch))
        group(self, db, batch)

    monkeypatch.setattr(SqliteStore, "_group", counted)

    async def body(store: SqliteStore) -> None:
        await started(store, "running")
        writes = [store.send("inbox", raised(str(n)), T0) for n in range(40)]
        writes.insert(20, store.create_instance(record("running"), start_message(), NON_RUNNING))
        outcomes = await asyncio.gather(*writes, return_exceptions=True)

        refused = [o for o in outcomes if isinstance(o, BaseException)]
        assert len(refused) == 1 and isinstance(refused[0], InstanceExistsError)
        sent = await store.fetch_messages("inbox", T0)
        assert [m["event"]["Name"] for _, m in sent] == [str(n) for n in range(40)]
        assert (await store.get_instance("running")).status == "Running"

    run(tmp_path, body)
    assert sum(groups) == 2 + 41  # the two writes of ``started``, then the gathered ones
    assert max(groups) > 1  # writes queued behind a commit went into one transaction


def test_a_read_sees_every_write_queued_before_it_and_no_write_is_left_behind(
    tmp_path: Path,
) -> None:
    # Writes go to the group a queued drain takes; a read queued after a write runs after
    # that write's group committed.
    async def body(store: SqliteStore) -> None:
        calls: list[Any] = []
        for n in range(30):
            calls.append(store.send("inbox", raised(str(n)), T0))
            calls.append(store.fetch_messages("inbox", T0))
        async with asyncio.timeout(30):
            outcomes = await asyncio.gather(*calls)
        seen = [len(messages) for messages in outcomes[1::2]]
        assert all(count >= n + 1 for n, count in enumerate(seen)), seen
        assert seen[-1] == 30
        for n in range(5):
            async with asyncio.timeout(10):
                await store.send("inbox", raised(f"late {n}"), T0)
        assert len(await store.fetch_messages("inbox", T0)) == 35

    run(tmp_path, body)
