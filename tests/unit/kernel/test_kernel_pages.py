"""Sealed pages: the head stays small, every record stays readable exactly once, in order."""

import copy
import json
from typing import Any

import pytest

from kernel.common import ids
from kernel.common.errors import ConflictError, CursorExpiredError, NotFoundError, ValidationError
from kernel.session import pages
from kernel.session import reducer as session

T0 = "2025-01-01T00:00:00Z"


class Sealed:
    """A session driven like the entity drives it: apply, then seal, pages kept in a dict."""

    def __init__(self, page_size: int = 4) -> None:
        self.state = session.new_state("s1", T0)
        self.page_size = page_size
        self.store: dict[str, str] = {}

    def load(self, ref: str) -> dict[str, Any]:
        loaded: dict[str, Any] = json.loads(self.store[ref])
        return loaded

    def run(self, op: str, request: dict[str, Any]) -> Any:
        new, result = session.apply(self.state, op, request, T0)
        if new is not self.state:
            head, texts = session.seal(new, self.page_size)
            self.store.update(texts)
            self.state = head
        return result

    def turn(self, i: int, tools: int = 2) -> str:
        accepted = self.run("accept", {"request_id": f"r{i}", "text": f"question {i}"})
        sub = accepted["submission_id"]
        turn = accepted["turn_instance_id"]
        for t in range(tools):
            self.run("commit", {
                "submission_id": sub,
                "entries": [{"role": "assistant", "text": f"call {t}"}],
                "tasks": [{"id": f"{sub}:tool:1:{t}", "kind": "tool", "parent": turn,
                           "status": "completed"}],
            })  # fmt: skip
        self.run("commit", {"submission_id": sub, "entries": [{"role": "assistant", "text": "a"}],
                            "tasks": [{"id": turn, "status": "completed"}],
                            "submission": {"status": "completed", "answer": "a"}})  # fmt: skip
        return str(sub)


def follow(s: Sealed, after: int, limit: int | None) -> list[int]:
    seen: list[int] = []
    while page := session.changes_after(s.state, after, limit, s.load):
        seen += [r["cursor"] for r in page]
        after = page[-1]["cursor"]
    return seen


def test_seal_is_pure_and_returns_the_input_when_nothing_is_due() -> None:
    state = session.new_state("s1", T0)
    state, _ = session.commit(state, {"entries": [{"role": "system", "text": "x"}]}, T0)

    assert session.seal(state, 4) == (state, {})
    assert session.seal(state, 4)[0] is state

    for i in range(10):
        state, _ = session.commit(state, {"entries": [{"role": "system", "text": f"{i}"}]}, T0)
    before = copy.deepcopy(state)
    head, texts = session.seal(state, 4)
    assert state == before and head is not state and texts


def test_the_head_keeps_a_bounded_tail_and_pages_hold_the_rest() -> None:
    s = Sealed(page_size=4)
    for i in range(40):
        s.turn(i)

    head = s.state
    assert all(4 <= len(head[log]) < 8 for log in ("entries", "changes"))
    # Only the recent settled submissions (fewer than 2 * max(1, 4 // 8)) stay in the head.
    assert len(head["submissions"]) < 2 and len(head["tasks"]) <= 3
    counts = session.view_counts(head)
    assert counts["entries"] == 40 * 4 and counts["submissions"] == 40
    assert counts["sealed"]["submissions"] == head["counts"]["sealed_submissions"]
    # Every page the head references was handed out to be stored.
    for items in head["pages"].values():
        for item in items:
            assert item["ref"] in s.store


def test_entries_read_across_pages_exactly_once_in_order() -> None:
    s = Sealed(page_size=3)
    for i in range(12):
        s.turn(i)
    last = session.view_counts(s.state)["entries"]

    for after in (0, 1, 5, 17, last - 1, last):
        for limit in (None, 1, 4, 1000):
            seen: list[int] = []
            cursor = after
            while page := session.entries_after(s.state, cursor, limit, s.load):
                seen += [e["n"] for e in page]
                cursor = page[-1]["n"]
            assert seen == list(range(after + 1, last + 1))


@pytest.mark.parametrize("limit", [None, 1, 5, 64])
def test_the_change_stream_crosses_pages_from_any_cursor(limit: int | None) -> None:
    s = Sealed(page_size=4)
    for i in range(15):
        s.turn(i)
    cursor = s.state["cursor"]

    for start in range(0, cursor + 1, 7):
        assert follow(s, start, limit) == list(range(start + 1, cursor + 1))


def test_the_directory_folds_into_index_pages_and_stays_small() -> None:
    state = session.new_state("s1", T0)
    store: dict[str, str] = {}
    for i in range(600):
        state, _ = session.commit(state, {"entries": [{"role": "system", "text": f"{i}"}]}, T0)
        state, texts = session.seal(state, 2)
        store.update(texts)

    directory = state["pages"]["entries"]
    levels = [item["level"] for item in directory]
    assert max(levels) >= 2 and levels == sorted(levels, reverse=True)
    assert all(levels.count(level) < 2 * pages.FANOUT for level in set(levels))
    load = lambda ref: json.loads(store[ref])
    numbers = [e["n"] for e in pages.iter_records(state, "entries", load)]
    assert numbers == list(range(1, 601))
    assert [e["n"] for e in session.entries_after(state, 299, 3, load)] == [300, 301, 302]


def test_a_reader_without_a_loader_gets_a_clear_error_for_sealed_records() -> None:
    s = Sealed(page_size=2)
    for i in range(5):
        s.turn(i)

    with pytest.raises(CursorExpiredError):
        session.changes_after(s.state, 0)


def test_open_submissions_and_open_tasks_are_never_sealed() -> None:
    s = Sealed(page_size=2)
    stuck = s.run("accept", {"request_id": "stuck", "text": "q"})
    s.run("commit", {"submission_id": stuck["submission_id"], "tasks": [
        {"id": f"{stuck['submission_id']}:tool:1:0", "kind": "tool",
         "parent": stuck["turn_instance_id"], "status": "running"}]})  # fmt: skip
    s.run("finish", {"submission_id": stuck["submission_id"], "status": "failed"})
    for i in range(10):
        s.turn(100 + i)
    active = s.run("accept", {"request_id": "a", "text": "q"})["submission_id"]
    queued = s.run("accept", {"request_id": "b", "text": "q"})["submission_id"]
    for i in range(6):
        s.run("commit", {"submission_id": active, "entries": [{"role": "system", "text": "x"}]})

    head = s.state
    assert {active, queued} <= set(head["submissions"]) and head["turn_queue"] == [queued]
    # The failed submission keeps a running tool task: it is not settled, so it stays.
    assert stuck["submission_id"] in head["submissions"]
    assert f"{stuck['submission_id']}:tool:1:0" in head["tasks"]
    assert head["counts"]["sealed_submissions"] >= 8


def test_a_sealed_submission_is_found_by_id_with_its_tasks() -> None:
    s = Sealed(page_size=2)
    first = s.turn(0)
    for i in range(1, 10):
        s.turn(i)

    assert first not in s.state["submissions"]
    record = pages.sealed_submission(s.state, first, s.load)
    assert record is not None and record["submission"]["status"] == "completed"
    turn = ids.turn_instance_id("s1", first)
    assert turn in record["tasks"]
    # Its finished tool subtrees may have been sealed earlier, on their own pages.
    trees = [t for r in pages.iter_records(s.state, "tasks", s.load) for t in r["tasks"]]
    assert {f"{first}:tool:1:0", f"{first}:tool:1:1"} <= set(record["tasks"]) | set(trees)
    view = session.sealed_submission_view(s.state, first, s.load)
    assert view is not None and view["position"] is None and view["answer"] == "a"
    assert set(pages.sealed_submission_ids(s.state, s.load)) >= {first}
    assert pages.sealed_submission(s.state, "nope", s.load) is None


def test_a_long_turn_keeps_only_its_recent_finished_rounds_in_the_head() -> None:
    s = Sealed(page_size=8)
    accepted = s.run("accept", {"request_id": "long", "text": "q"})
    sub, turn = accepted["submission_id"], accepted["turn_instance_id"]
    for r in range(1, 41):
        round_id = f"{turn}:run:round-{r}"
        s.run("commit", {"submission_id": sub, "tasks": [
            {"id": round_id, "kind": "round", "parent": turn, "status": "running"},
            {"id": f"{round_id}:model", "kind": "model", "parent": round_id,
             "status": "completed"}]})  # fmt: skip
        s.run("commit", {"submission_id": sub, "tasks": [{"id": round_id, "status": "completed"}]})

    head = s.state
    assert len(head["tasks"]) < 1 + 2 * 2 * 2  # the turn and fewer than 2R done rounds of 2
    assert len(head["tasks"][turn]["children"]) == 40
    trees = list(pages.iter_records(head, "tasks", s.load))
    assert [t["seq"] for t in trees] == list(range(1, len(trees) + 1))
    sealed = {t for tree in trees for t in tree["tasks"]}
    assert sealed | set(head["tasks"]) == {turn} | {
        f"{turn}:run:round-{r}{suffix}" for r in range(1, 41) for suffix in ("", ":model")
    }


def test_an_open_round_is_never_sealed() -> None:
    s = Sealed(page_size=4)
    accepted = s.run("accept", {"request_id": "long", "text": "q"})
    sub, turn = accepted["submission_id"], accepted["turn_instance_id"]
    s.run(
        "commit",
        {
            "submission_id": sub,
            "tasks": [{"id": f"{turn}:open", "kind": "round", "parent": turn, "status": "running"}],
        },
    )
    for r in range(20):
        s.run(
            "commit",
            {
                "submission_id": sub,
                "tasks": [
                    {"id": f"{turn}:r{r}", "kind": "round", "parent": turn, "status": "completed"}
                ],
            },
        )

    assert f"{turn}:open" in s.state["tasks"] and len(s.state["tasks"]) < 8


def test_page_texts_are_canonical_so_equal_pages_share_a_ref() -> None:
    a = pages.page_text("entries", "s1", [{"n": 1, "b": 2, "a": 1}])
    b = pages.page_text("entries", "s1", [{"a": 1, "n": 1, "b": 2}])
    assert a == b


# --- document tombstones ----------------------------------------------------------------


def note(text: str = "t", **extra: Any) -> dict[str, Any]:
    return {"id": "n1", "type": "note", "data": {"title": "n1", "text": text}, **extra}


def tombstone(**extra: Any) -> dict[str, Any]:
    return {"id": "n1", "type": "note", "delete": True, **extra}


def test_a_delete_writes_a_tombstone_version_and_a_rewrite_creates_again() -> None:
    state = session.new_state("s1", T0)
    state, _ = session.commit(state, {"documents": [note()]}, T0)
    state, deleted = session.commit(state, {"documents": [tombstone(expected_version=1)]}, T0)

    assert deleted["document_versions"] == {"n1": 2}
    assert state["documents"]["n1"] == {
        "type": "note", "version": 2, "data": None, "deleted": True, "updated_at": T0,
    }  # fmt: skip
    assert state["changes"][-1]["items"] == [
        {"type": "document", "id": "n1", "doc_type": "note", "version": 2, "deleted": True}
    ]
    assert session.view_counts(state)["documents"] == 0

    state, again = session.commit(state, {"documents": [note("back", expected_version=2)]}, T0)
    assert again["document_versions"] == {"n1": 3}
    assert [row["op"] for row in state["document_history"]] == ["create", "delete", "create"]


def test_deleting_what_is_absent_or_deleted_or_stale_changes_nothing() -> None:
    state = session.new_state("s1", T0)
    with pytest.raises(NotFoundError, match="document_not_found"):
        session.commit(state, {"documents": [tombstone()]}, T0)
    state, _ = session.commit(state, {"documents": [note()]}, T0)
    with pytest.raises(ConflictError, match="version_conflict"):
        session.commit(state, {"documents": [tombstone(expected_version=3)]}, T0)
    state, _ = session.commit(state, {"documents": [tombstone()]}, T0)
    before = json.dumps(state)
    with pytest.raises(NotFoundError) as caught:
        session.commit(state, {"documents": [tombstone()]}, T0)
    assert caught.value.field == "documents[0].id" and json.dumps(state) == before


def test_a_delete_carries_no_data_and_a_write_needs_data() -> None:
    state = session.new_state("s1", T0)
    with pytest.raises(ValidationError, match="ambiguous_body"):
        session.commit(state, {"documents": [tombstone(data={"title": "x", "text": ""})]}, T0)
    with pytest.raises(ValidationError, match="missing_field"):
        session.commit(state, {"documents": [{"id": "n1", "type": "note"}]}, T0)


# --- documents in bucket pages -------------------------------------------------------------


def test_cold_documents_move_into_bucket_pages_and_stay_readable() -> None:
    state = session.new_state("s1", T0)
    store: dict[str, str] = {}
    load = lambda ref: json.loads(store[ref])
    for i in range(60):
        at = f"2025-01-01T00:00:{i:02d}Z"
        doc = {"id": f"d{i}", "type": "json", "data": {"i": i}}
        state, _ = session.commit(state, {"documents": [doc]}, at)
        state, texts = session.seal(state, 4, load)
        store.update(texts)

    assert len(state["documents"]) < 8 and "d59" in state["documents"]
    assert session.view_counts(state)["documents"] == 60
    assert sum(b["count"] for b in state["document_buckets"].values()) == 60 - len(
        state["documents"]
    )
    assert pages.sealed_document(state, "d3", load)["data"] == {"i": 3}
    assert pages.sealed_document(state, "nope", load) is None

    # A commit naming a sealed document sees it once the entity puts it back.
    back = pages.with_documents(state, ["d3", "d59", "nope"], load)
    assert back["documents"]["d3"]["version"] == 1 and "nope" not in back["documents"]
    assert pages.with_documents(state, ["d59"], load) is state
    new, result = session.commit(
        back, {"documents": [{"id": "d3", "type": "json", "data": 0, "expected_version": 1}]}, T0
    )
    assert result["document_versions"] == {"d3": 2}
    assert session.view_counts(new)["documents"] == 60
    head, texts = session.seal(new, 4, load)
    store.update(texts)
    assert pages.with_documents(head, ["d3"], load)["documents"]["d3"]["version"] == 2


def test_without_a_loader_documents_stay_in_the_head() -> None:
    state = session.new_state("s1", T0)
    for i in range(10):
        state, _ = session.commit(state, {"documents": [{"id": f"d{i}", "type": "json",
                                                         "data": i}]}, T0)  # fmt: skip
    head, _ = session.seal(state, 4)
    assert len(head["documents"]) == 10 and head["document_buckets"] == {}
