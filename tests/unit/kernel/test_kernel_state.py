import copy
import json
from typing import Any

import pytest

from kernel.common import ids
from kernel.common.errors import ConflictError, CursorExpiredError, NotFoundError, ValidationError
from kernel.session import reducer as session
from kernel.session.state import SCHEMA_VERSION, decode_entity_state, validate_timestamp

T0 = "2025-01-01T00:00:00Z"


def v1_state() -> dict[str, Any]:
    """A state as version 1 wrote it: no change log."""
    sub = ids.submission_id("s1", "r1")
    turn = ids.turn_instance_id("s1", sub)
    return {
        "schema_version": 1, "session_id": "s1", "created_at": T0, "cursor": 1,
        "conversations": {"main": {"id": "main", "created_at": T0}},
        "entries": [{"n": 1, "conversation": "main", "role": "user", "kind": "message",
                     "text": "hi", "content_ref": None, "data": None, "submission_id": sub,
                     "at": T0}],
        "documents": {}, "document_history": [],
        "tasks": {turn: {"id": turn, "kind": "turn", "version": None, "status": "pending",
                         "phase": None, "parent": None, "children": [], "created_at": T0,
                         "updated_at": T0, "reason": None}},
        "submissions": {sub: {
            "id": sub, "request_id": "r1", "text": "hi", "text_ref": None, "status": "active",
            "accepted_at": T0, "started_at": T0, "finished_at": None, "answer": None,
            "turn_instance_id": turn, "entry": 1, "cancel_requested_at": None,
            "cancel_reason": None, "finished_cursor": None, "next_submission_id": None}},
        "turn_queue": [], "active_submission": sub,
    }  # fmt: skip


def test_a_new_state_is_json_and_current() -> None:
    state = session.new_state("s1", T0)

    assert json.loads(json.dumps(state)) == state
    assert (state["schema_version"], state["cursor"], list(state["conversations"])) == (
        SCHEMA_VERSION, 0, ["main"],
    )  # fmt: skip


def test_a_new_state_validates_its_inputs() -> None:
    with pytest.raises(ValidationError, match="invalid_session_id"):
        session.new_state("a/b", T0)
    with pytest.raises(ValidationError, match="invalid_timestamp"):
        session.new_state("s1", "yesterday")


@pytest.mark.parametrize("value", ["2025-01-01T00:00:00Z", "2025-01-01T00:00:00.123456+00:00"])
def test_utc_timestamps_are_accepted(value: str) -> None:
    assert validate_timestamp(value) == value


@pytest.mark.parametrize("value", ["2025-01-01T00:00:00", "2025-01-01T01:00:00+01:00", "", 0])
def test_non_utc_timestamps_are_rejected(value: object) -> None:
    with pytest.raises(ValidationError, match="invalid_timestamp"):
        validate_timestamp(value)


V3_ADDITIONS = {
    "pages": {"entries": [], "changes": [], "document_history": [], "submissions": [], "tasks": []},
    "document_buckets": {},
    "counts": {"sealed_submissions": 0, "documents": 0},
}
V4_ADDITIONS = {"owner": None}


def test_upgrade_v1_to_v4_adds_an_empty_change_log_without_touching_the_input() -> None:
    old = v1_state()
    before = copy.deepcopy(old)

    new = session.upgrade(old)

    assert old == before
    # v1 -> v2 starts the log empty, so it holds nothing before the next cursor.
    assert (
        new
        == before
        | {"schema_version": 4, "changes": [], "changes_from": 2}
        | V3_ADDITIONS
        | V4_ADDITIONS
    )


def test_upgrade_v2_to_v4_keeps_the_log_and_starts_an_empty_page_directory() -> None:
    v2 = session.upgrade(v1_state())
    v2, _ = session.commit(v2, {"entries": [{"role": "system", "text": "x"}], "documents": [
        {"id": "d1", "type": "json", "data": 1}]}, T0)  # fmt: skip
    for key in ("changes_from", *V3_ADDITIONS, *V4_ADDITIONS):
        del v2[key]
    v2["schema_version"] = 2
    before = copy.deepcopy(v2)

    new = session.upgrade(v2)

    assert v2 == before
    counted = {"counts": {"sealed_submissions": 0, "documents": 1}}
    expected = before | {"schema_version": 4, "changes_from": 2} | V3_ADDITIONS | counted
    assert new == expected | V4_ADDITIONS
    assert [c["cursor"] for c in session.changes_after(new, 1)] == [2]
    with pytest.raises(CursorExpiredError):
        session.changes_after(new, 0)


def test_a_migrated_v2_state_is_sealed_by_its_next_write() -> None:
    v2 = session.upgrade(v1_state())
    for i in range(12):
        v2, _ = session.commit(v2, {"entries": [{"role": "system", "text": f"e{i}"}]}, T0)
    for key in ("changes_from", *V3_ADDITIONS, *V4_ADDITIONS):
        del v2[key]
    v2["schema_version"] = 2

    new, _ = session.commit(v2, {"entries": [{"role": "system", "text": "last"}]}, T0)
    head, pages = session.seal(new, 4)

    assert head["schema_version"] == SCHEMA_VERSION
    assert len(head["entries"]) < 8 and pages
    loaded = {ref: json.loads(text) for ref, text in pages.items()}
    numbers = [e["n"] for e in session.entries_after(head, 0, None, loaded.__getitem__)]
    assert numbers == list(range(1, 15))


def test_a_current_state_is_not_copied_by_upgrade() -> None:
    state = session.new_state("s1", T0)

    assert session.upgrade(state) is state


@pytest.mark.parametrize("version", [SCHEMA_VERSION + 1, 0, None, "2"])
def test_unknown_schema_versions_are_refused(version: object) -> None:
    with pytest.raises(ConflictError, match="unsupported_schema_version"):
        session.upgrade(v1_state() | {"schema_version": version})


def test_operations_upgrade_an_old_state_on_read() -> None:
    old = v1_state()
    sub = ids.submission_id("s1", "r1")

    new, result = session.finish(old, {"submission_id": sub, "status": "completed"}, T0)

    assert new["schema_version"] == SCHEMA_VERSION
    assert result["cursor"] == 2
    assert [c["cursor"] for c in session.changes_after(new, 1)] == [2]


def test_a_duplicate_on_an_old_state_returns_the_upgraded_state_to_persist() -> None:
    old = v1_state()

    new, result = session.accept(old, {"request_id": "r1", "text": "hi"}, T0)

    assert result["duplicate"]
    assert new is not old
    assert new["schema_version"] == SCHEMA_VERSION


def test_changes_from_before_the_migration_are_expired() -> None:
    migrated = session.upgrade(v1_state())

    assert session.changes_after(migrated, 1) == []
    with pytest.raises(CursorExpiredError):
        session.changes_after(migrated, 0)


class _Read:
    def __init__(self, exists: bool, state: object) -> None:
        self.entity_exists, self.entity_state = exists, state


def test_decode_entity_state_reads_json_text_or_objects_and_nothing_else():
    assert decode_entity_state(_Read(True, '{"cursor": 3}')) == {"cursor": 3}
    assert decode_entity_state(_Read(True, {"cursor": 3})) == {"cursor": 3}
    assert decode_entity_state(_Read(False, '{"cursor": 3}')) is None
    assert decode_entity_state(_Read(True, None)) is None
    assert decode_entity_state(_Read(True, "[1]")) is None


def test_upgrade_v3_to_v4_leaves_the_session_unowned() -> None:
    v3 = session.new_state("s1", T0)
    del v3["owner"]
    v3["schema_version"] = 3

    new = session.upgrade(v3)

    assert "owner" not in v3
    assert (new["schema_version"], new["owner"]) == (4, None)


def test_the_first_accept_with_an_owner_records_it_and_refuses_other_principals() -> None:
    state, _ = session.accept(session.new_state("s1", T0), {"request_id": "r1", "text": "hi",
                                                           "owner": "alice"}, T0)  # fmt: skip

    again, _ = session.accept(state, {"request_id": "r2", "text": "more", "owner": "alice"}, T0)
    unchecked, _ = session.accept(state, {"request_id": "r3", "text": "no owner key"}, T0)
    before = copy.deepcopy(state)
    for other in ("bob", None):
        with pytest.raises(NotFoundError, match="session_not_found"):
            session.accept(state, {"request_id": "r1", "text": "hi", "owner": other}, T0)

    assert state["owner"] == again["owner"] == unchecked["owner"] == "alice"
    assert state == before


def test_an_unowned_session_stays_unowned_when_an_owner_comes_later() -> None:
    state, _ = session.accept(session.new_state("s1", T0), {"request_id": "r1", "text": "hi"}, T0)

    later, result = session.accept(state, {"request_id": "r2", "text": "x", "owner": "bob"}, T0)

    assert later["owner"] is None and result["duplicate"] is False


@pytest.mark.parametrize("owner", ["", "a b", "x" * 129, 7])
def test_a_malformed_owner_is_refused(owner: object) -> None:
    with pytest.raises(ValidationError):
        session.accept(session.new_state("s1", T0), {"request_id": "r1", "text": "hi",
                                                    "owner": owner}, T0)  # fmt: skip


def test_sealing_keeps_the_owner_in_the_head() -> None:
    state, _ = session.accept(session.new_state("s1", T0), {"request_id": "r1", "text": "hi",
                                                           "owner": "alice"}, T0)  # fmt: skip
    for i in range(12):
        state, _ = session.commit(state, {"entries": [{"role": "system", "text": f"e{i}"}]}, T0)

    head, pages = session.seal(state, 4)

    assert pages and head["owner"] == "alice"
