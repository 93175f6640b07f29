"""The session entity's shell: pages are stored before the head that references them, and
a sealed submission is still answered (a retried request id stays a duplicate)."""

from pathlib import Path
from typing import Any

import pytest

from adapters.content_store import FileContentStore
from entities import session as entity
from entities import session_pages
from kernel.session import pages

T0 = "2025-01-01T00:00:00Z"


@pytest.fixture(autouse=True)
def _content(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Files, even when the suite has exported an AzureWebJobsStorage for its Azure hosts.
    monkeypatch.setenv("AGENT_STATE_STORE", "file")
    monkeypatch.setenv("AGENT_CONTENT_DIR", str(tmp_path / "content"))
    monkeypatch.setenv("AGENT_SESSION_PAGE_SIZE", "2")
    session_pages._cache.clear()


class Entity:
    def __init__(self) -> None:
        self.state: dict[str, Any] | None = None

    def __call__(self, op: str, request: Any) -> dict[str, Any]:
        outcome = entity.handle(self.state, "s1", op, request, T0)
        if outcome.state is not None:
            self.state = outcome.state
        return outcome.envelope

    def turn(self, i: int) -> str:
        sub = self("accept", {"request_id": f"r{i}", "text": f"q{i}"})["result"]["submission_id"]
        self(
            "commit",
            {
                "submission_id": sub,
                "entries": [{"role": "assistant", "text": "a"}],
                "submission": {"status": "completed", "answer": f"a{i}"},
            },
        )
        return str(sub)


def test_every_page_the_head_references_is_already_stored() -> None:
    e = Entity()
    for i in range(12):
        e.turn(i)

    assert e.state is not None
    store = FileContentStore()
    refs = [item["ref"] for items in e.state["pages"].values() for item in items]
    assert refs and all(store.get(ref) for ref in refs)
    assert e.state["counts"]["sealed_submissions"] > 0


def test_a_sealed_submission_is_still_a_duplicate_and_still_readable() -> None:
    e = Entity()
    first = e.turn(0)
    for i in range(1, 12):
        e.turn(i)
    assert e.state is not None and first not in e.state["submissions"]
    before = e.state

    again = e("accept", {"request_id": "r0", "text": "other text"})
    assert again == {
        "ok": True,
        "result": {
            "submission_id": first,
            "status": "completed",
            "duplicate": True,
            "position": None,
        },
    }
    assert e.state is before  # nothing written

    view = e("submission_view", {"submission_id": first})["result"]
    assert view["answer"] == "a0" and view["position"] is None
    finish = e("finish", {"submission_id": first, "status": "failed"})["result"]
    assert finish["duplicate"] and finish["status"] == "completed"
    cancel = e("cancel", {"submission_id": first})["result"]
    assert cancel["changed"] is False and cancel["status"] == "completed"


def test_a_new_request_id_after_sealing_is_a_new_submission() -> None:
    e = Entity()
    for i in range(12):
        e.turn(i)

    fresh = e("accept", {"request_id": "new", "text": "q"})["result"]
    assert fresh["duplicate"] is False and fresh["active"] is True


def test_markers_belong_to_one_incarnation_of_a_session() -> None:
    e = Entity()
    first = e.turn(0)
    for i in range(1, 12):
        e.turn(i)
    assert e.state is not None
    marker = pages.submission_marker(e.state, first)
    assert session_pages.has_content(marker)

    reborn = {**e.state, "created_at": "2026-01-01T00:00:00Z"}
    assert not session_pages.has_content(pages.submission_marker(reborn, first))


def test_a_commit_to_a_document_sealed_in_a_bucket_checks_its_real_version() -> None:
    e = Entity()
    for i in range(12):
        e("commit", {"documents": [{"id": f"d{i}", "type": "json", "data": i}]})
    assert e.state is not None and "d0" not in e.state["documents"]

    stale = e("commit", {"documents": [{"id": "d0", "type": "json", "data": 9,
                                        "expected_version": 0}]})  # fmt: skip
    fresh = e("commit", {"documents": [{"id": "d0", "type": "json", "data": 9,
                                        "expected_version": 1}]})  # fmt: skip

    assert stale["ok"] is False and stale["error"]["error"] == "version_conflict"
    assert fresh["ok"] is True and fresh["result"]["document_versions"] == {"d0": 2}
    assert session_pages.document(e.state, "d0")["data"] == 9
    assert session_pages.document(e.state, "d1")["data"] == 1
