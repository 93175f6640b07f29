"""The SQLite store keeps its file to one host and tells storage failures apart.

One host per *file*, whatever path reaches it; a host that lost the file (taken over,
removed, replaced, corrupt) writes nothing more; a full disk is a passing ``StoreError``
that names itself; a COMMIT that reports an error after it applied stands.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from durable_host.core.orchestration import Episode
from durable_host.functions.config import NON_RUNNING
from durable_host.store.base import StoreError, StoreLockedError, StoreLostError
from durable_host.store.sqlite.guard import StoreCorruptError, StoreFailedError
from durable_host.store.sqlite.store import SqliteStore
from tests.store.contract_support import T0, event, record, start_message


def run(body: Any) -> Any:
    return asyncio.run(body())


async def opened(path: Path, **kw: Any) -> SqliteStore:
    store = SqliteStore(path, **kw)
    await store.open()
    return store


async def create(store: SqliteStore, instance_id: str) -> None:
    await store.create_instance(record(instance_id), start_message(), NON_RUNNING)


@pytest.mark.parametrize("alias", ["same path", "symlink", "hard link", "relative path"])
def test_a_second_store_on_the_same_file_by_any_path_is_refused(
    tmp_path: Path, alias: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    hub = tmp_path / "hub.db"
    monkeypatch.chdir(tmp_path)

    async def body() -> None:
        first = await opened(hub)
        try:
            other = {
                "same path": hub,
                "symlink": tmp_path / "alias.db",
                "hard link": tmp_path / "link.db",
                "relative path": Path("./sub/../hub.db"),
            }[alias]
            (tmp_path / "sub").mkdir()
            if alias == "symlink":
                other.symlink_to(hub)
            elif alias == "hard link":
                os.link(hub, other)
            with pytest.raises(StoreLockedError, match="Another durable host is already using"):
                await opened(other)
            await create(first, "still-mine")
        finally:
            await first.close()

    run(body)
    assert not list(tmp_path.glob("*.lock")), "the lock is the file itself, not a side file"


def test_a_copy_of_the_file_is_another_task_hub(tmp_path: Path) -> None:
    async def body() -> None:
        first = await opened(tmp_path / "hub.db")
        await create(first, "a")
        shutil.copy(tmp_path / "hub.db", tmp_path / "copy.db")
        copy = await opened(tmp_path / "copy.db")
        await create(copy, "b")
        assert await first.get_instance("b") is None
        await copy.close()
        await first.close()

    run(body)


def test_a_host_that_lost_the_file_to_a_newer_owner_writes_nothing(tmp_path: Path) -> None:
    lost: list[str] = []

    async def body() -> None:
        old = await opened(tmp_path / "hub.db", on_lost=lost.append)
        await create(old, "before")
        old._owner.unlock()  # a lock that failed to exclude (e.g. a network file system)
        new = await opened(tmp_path / "hub.db")

        with pytest.raises(StoreLostError, match="took over"):
            await create(old, "late")
        with pytest.raises(StoreLostError):
            await old.get_instance("before")  # it stops serving too

        assert await new.get_instance("late") is None
        assert (await new.get_instance("before")) is not None
        await new.close()
        await old.close()

    run(body)
    assert len(lost) == 1 and "took over" in lost[0]


@pytest.mark.parametrize("how", ["removed", "replaced"])
def test_a_file_removed_or_replaced_under_the_store_stops_it(tmp_path: Path, how: str) -> None:
    hub = tmp_path / "hub.db"
    lost: list[str] = []

    async def body() -> None:
        store = await opened(hub, on_lost=lost.append)
        await create(store, "a")
        if how == "removed":
            hub.unlink()
        else:
            shutil.copy(hub, tmp_path / "other.db")
            os.replace(tmp_path / "other.db", hub)

        with pytest.raises(StoreLostError, match=how):
            await create(store, "b")
        await store.close()

    run(body)
    assert len(lost) == 1 and how in lost[0]


def test_a_corrupt_file_is_refused_at_open_with_a_clear_error(tmp_path: Path) -> None:
    hub = tmp_path / "hub.db"

    async def fill() -> None:
        store = await opened(hub)
        for n in range(200):
            await create(store, f"instance-{n:04d}-" + "x" * 200)
        await store.close()

    run(fill)
    with hub.open("r+b") as f:
        f.seek(4096 * 3)
        f.write(b"\xa5" * 4096 * 2)

    with pytest.raises(StoreCorruptError, match="is corrupt"):
        run(lambda: opened(hub))
    # The lock is given back: after the file is repaired or moved away a host can start.
    hub.rename(tmp_path / "hub.db.broken")
    run(lambda: _open_close(hub))


async def _open_close(path: Path) -> None:
    await (await opened(path)).close()


def test_a_full_disk_is_a_passing_store_error_that_names_itself(tmp_path: Path) -> None:
    async def body() -> None:
        store = await opened(tmp_path / "hub.db")
        await create(store, "a")
        assert store._db is not None
        pages = store._db.execute("PRAGMA page_count").fetchone()[0]
        store._db.execute(f"PRAGMA max_page_count={pages}")

        with pytest.raises(StoreFailedError, match="full") as failure:
            for n in range(50):
                await create(store, f"big-{n}-" + "y" * 5000)
        assert isinstance(failure.value, StoreError)
        assert "cannot rollback" not in str(failure.value)

        store._db.execute("PRAGMA max_page_count=1073741823")
        await create(store, "after")  # the store recovers with the disk
        assert await store.get_instance("after") is not None
        await store.close()

    run(body)


def test_a_commit_that_reports_failure_after_it_applied_stands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(
        "DURABLE_HOST_STORE_FAULTS", "commit_episode.after@1,create_instance.before@2"
    )

    async def body() -> None:
        store = await opened(tmp_path / "hub.db")
        await create(store, "a")
        with pytest.raises(StoreFailedError, match="full"):
            await create(store, "b")  # failed before its COMMIT: nothing applied
        assert await store.get_instance("b") is None

        messages = await store.fetch_messages("a", T0)
        episode = Episode(
            consumed=[i for i, _ in messages],
            events=[event(0)],
            replace_history=True,
            execution_id="e1",
            status="Running",
            name="orch",
            input_json='"in"',
        )
        await store.commit_episode("a", episode, T0)  # the lost answer is resolved

        assert await store.fetch_messages("a", T0) == []
        assert len(await store.get_history("a")) == 1
        await store.close()

    run(body)


def test_corruption_met_while_serving_loses_the_store(tmp_path: Path) -> None:
    lost: list[str] = []

    async def body() -> None:
        store = await opened(tmp_path / "hub.db", on_lost=lost.append)

        def read_a_damaged_page(db: Any) -> None:
            raise sqlite3.DatabaseError("database disk image is malformed")

        with pytest.raises(StoreCorruptError, match="is corrupt"):
            await store._run(read_a_damaged_page)
        with pytest.raises(StoreCorruptError):
            await store.get_instance("a")  # nothing more is served from the file
        await store.close()

    run(body)
    assert len(lost) == 1 and "is corrupt" in lost[0]
