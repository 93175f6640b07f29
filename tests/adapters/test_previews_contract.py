"""Contract of the preview store port (files; blobs on Azurite) and of its coalescing writer."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from adapters.previews import BlobPreviewStore, FilePreviewStore, PreviewStore, PreviewWriter
from kernel.session import previews as rules


@pytest.fixture(params=["file", "blob"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> PreviewStore:
    if request.param == "file":
        return FilePreviewStore(tmp_path / "previews")
    return BlobPreviewStore(request.getfixturevalue("blob_container"))


def record(task: str, seq: int, text: str, session: str = "s1") -> dict[str, Any]:
    return rules.record(
        session_id=session,
        task=task,
        kind=rules.MODEL_TEXT,
        submission_id="sub",
        seq=seq,
        text=text,
        at="2026-01-01T00:00:00.000000Z",
    )


def test_a_put_overwrites_the_record_of_its_task(store: PreviewStore) -> None:
    store.put(record("s1:turn:sub:run:round-1", 1, "He"))
    store.put(record("s1:turn:sub:run:round-1", 2, "Hello"))
    store.put(record("sub:tool:1:0", 1, "running calculator"))
    store.put(record("other-task", 1, "elsewhere", session="s2"))

    found = sorted(store.list("s1"), key=lambda r: r["task"])

    assert [(r["task"], r["seq"], r["text"]) for r in found] == [
        ("s1:turn:sub:run:round-1", 2, "Hello"),
        ("sub:tool:1:0", 1, "running calculator"),
    ]
    assert store.get("s1", "s1:turn:sub:run:round-1")["seq"] == 2  # type: ignore[index]
    assert store.get("s1", "absent") is None
    assert store.list("s1-not-a-prefix") == []


def test_delete_and_clear_remove_records_and_absent_ones_are_fine(store: PreviewStore) -> None:
    store.put(record("a", 1, "x"))
    store.put(record("b", 1, "y"))
    store.delete("s1", "a")
    store.delete("s1", "a")
    assert [r["task"] for r in store.list("s1")] == ["b"]
    store.clear("s1")
    store.clear("s1")
    assert store.list("s1") == []


def test_a_damaged_file_reads_as_absent(tmp_path: Path) -> None:
    store = FilePreviewStore(tmp_path)
    store.put(record("a", 1, "x"))
    for path in (tmp_path / "s1").glob("*.json"):
        path.write_text("{not json")
    assert store.list("s1") == []
    assert store.get("s1", "a") is None


class MemoryStore:
    def __init__(self) -> None:
        self.records: dict[tuple[str, str], dict[str, Any]] = {}
        self.puts: list[dict[str, Any]] = []

    def put(self, record: dict[str, Any]) -> None:
        self.records[(record["session_id"], record["task"])] = record
        self.puts.append(record)

    def get(self, session_id: str, task: str) -> dict[str, Any] | None:
        return self.records.get((session_id, task))

    def list(self, session_id: str) -> list[dict[str, Any]]:
        return [r for (s, _), r in self.records.items() if s == session_id]

    def delete(self, session_id: str, task: str) -> None:
        self.records.pop((session_id, task), None)

    def clear(self, session_id: str) -> None:
        for key in [k for k in self.records if k[0] == session_id]:
            del self.records[key]


def writer(store: MemoryStore, interval_s: float = 0.05) -> PreviewWriter:
    return PreviewWriter(
        store,  # type: ignore[arg-type]
        session_id="s1",
        task="t",
        kind=rules.MODEL_TEXT,
        submission_id="sub",
        interval_s=interval_s,
    )


def test_updates_between_two_writes_coalesce_into_the_newest_text() -> None:
    async def scenario() -> MemoryStore:
        store = MemoryStore()
        w = writer(store)
        for i in range(1, 51):  # a burst: no write can run until the producer yields
            w.update("x" * i)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        await w.aclose()
        return store

    store = asyncio.run(scenario())
    assert [(p["seq"], len(p["text"])) for p in store.puts] == [(1, 50)]


def test_a_rerun_continues_the_sequence_and_a_clear_deletes() -> None:
    async def scenario() -> tuple[MemoryStore, list[int]]:
        store = MemoryStore()
        store.put(record("t", 7, "from the crashed run"))
        w = writer(store, interval_s=0.01)
        w.update("again")
        for _ in range(100):  # bounded: until the write landed
            if store.records[("s1", "t")]["seq"] == 8:
                break
            await asyncio.sleep(0.01)
        seqs = [p["seq"] for p in store.puts]
        await w.aclose(clear=True)
        return store, seqs

    store, seqs = asyncio.run(scenario())
    assert seqs == [7, 8]
    assert store.records == {}


def test_a_failing_store_never_fails_the_producer() -> None:
    class Broken(MemoryStore):
        def put(self, record: dict[str, Any]) -> None:
            self.puts.append(record)
            raise OSError("disk full")

    async def scenario() -> tuple[int, int]:
        store = Broken()
        w = writer(store)
        w.update("text")
        for _ in range(100):  # bounded: until the write was tried (a signal, not a set pause)
            if store.puts:
                break
            await asyncio.sleep(0.01)
        await w.aclose(clear=True)
        return len(store.puts), w.writes

    assert asyncio.run(scenario()) == (1, 1)
