from typing import Any

import pytest

from kernel.common.errors import CursorExpiredError, ValidationError
from kernel.session import changes
from kernel.session import reducer as session

T0 = "2025-01-01T00:00:00Z"


def busy_session(commits: int) -> dict[str, Any]:
    state = session.new_state("s1", T0)
    for i in range(commits):
        state, _ = session.commit(state, {"entries": [{"role": "system", "text": f"e{i}"}]}, T0)
    return state


def follow(state: dict[str, Any], after: int, limit: int | None) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    while page := session.changes_after(state, after, limit):
        seen += page
        after = page[-1]["cursor"]
    return seen


def test_each_commit_logs_one_record_under_the_next_cursor() -> None:
    state = busy_session(3)

    assert [c["cursor"] for c in state["changes"]] == [1, 2, 3]
    assert state["changes"][0] | {"items": None} == {
        "cursor": 1, "at": T0, "op": "commit", "kinds": ["entry"], "items": None,
    }  # fmt: skip


@pytest.mark.parametrize("limit", [None, 1, 2, 3, 7])
def test_following_pages_from_any_cursor_yields_each_change_exactly_once(limit: int | None) -> None:
    state = busy_session(7)

    for start in range(state["cursor"] + 1):
        seen = follow(state, start, limit)

        assert [c["cursor"] for c in seen] == list(range(start + 1, state["cursor"] + 1))


def test_the_current_cursor_has_no_changes_after_it() -> None:
    state = busy_session(2)

    assert session.changes_after(state, 2) == []


@pytest.mark.parametrize("after", [-1, 3, True, "1", None, 1.0])
def test_cursors_outside_the_log_are_invalid(after: object) -> None:
    with pytest.raises(ValidationError) as caught:
        session.changes_after(busy_session(2), after)

    assert (caught.value.code, caught.value.field) == ("invalid_cursor", "after")


def test_limit_must_be_positive() -> None:
    with pytest.raises(ValidationError, match="invalid_limit"):
        session.changes_after(busy_session(2), 0, 0)


def test_a_cursor_before_the_kept_log_of_a_migrated_session_expires() -> None:
    state = busy_session(5)
    state = {**state, "changes": state["changes"][2:], "changes_from": 3}  # as a v2 upgrade

    assert [c["cursor"] for c in session.changes_after(state, 2)] == [3, 4, 5]
    with pytest.raises(CursorExpiredError) as caught:
        session.changes_after(state, 1)
    assert (caught.value.code, caught.value.field, caught.value.http_status) == (
        "cursor_expired", "after", 410,
    )  # fmt: skip


def test_an_expired_reader_recovers_from_the_view() -> None:
    state = busy_session(5)
    state = {**state, "changes": state["changes"][3:], "changes_from": 4}

    view = session.view(state)
    state, _ = session.commit(state, {"entries": [{"role": "system", "text": "later"}]}, T0)

    assert [c["cursor"] for c in session.changes_after(state, view["cursor"])] == [6]


def test_one_answer_holds_at_most_max_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(changes, "MAX_CHANGES", 3)
    state = busy_session(5)

    assert [c["cursor"] for c in session.changes_after(state, 0)] == [1, 2, 3]
    assert [c["cursor"] for c in session.changes_after(state, 0, 10)] == [1, 2, 3]


def test_readers_get_copies() -> None:
    state = busy_session(1)

    session.changes_after(state, 0)[0]["items"].clear()

    assert state["changes"][0]["items"]


def test_the_changes_after_operation_reads_through_apply() -> None:
    state = busy_session(3)

    same, page = session.apply(state, "changes_after", {"after": 1, "limit": 1}, T0)

    assert same is state
    assert [c["cursor"] for c in page] == [2]
