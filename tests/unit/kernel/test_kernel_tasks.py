import json
from typing import Any

import pytest

from kernel.common.errors import ConflictError, KernelError, NotFoundError, ValidationError
from kernel.session import reducer as session
from kernel.session.tasks import can_transition

T0 = "2025-01-01T00:00:00Z"
T1 = "2025-01-01T00:00:01Z"


def with_tasks(*patches: dict[str, Any]) -> dict[str, Any]:
    state = session.new_state("s1", T0)
    state, _ = session.commit(state, {"tasks": list(patches)}, T0)
    return state


def rejects(state: dict[str, Any], *patches: dict[str, Any]) -> KernelError:
    before = json.dumps(state)
    with pytest.raises(KernelError) as caught:
        session.commit(state, {"tasks": list(patches)}, T1)
    assert json.dumps(state) == before
    return caught.value


@pytest.mark.parametrize(
    ("old", "new"),
    [("pending", "running"), ("pending", "completed"), ("running", "waiting"),
     ("waiting", "running"), ("sleeping", "needs_attention"), ("needs_attention", "running"),
     ("running", "completing"), ("completing", "failed"), ("running", "interrupted"),
     ("completed", "completed")],
)  # fmt: skip
def test_forward_transitions_are_allowed(old: str, new: str) -> None:
    assert can_transition(old, new)


@pytest.mark.parametrize(
    ("old", "new"),
    [("completed", "running"), ("failed", "completed"), ("cancelled", "pending"),
     ("interrupted", "running"), ("running", "pending"), ("completing", "running"),
     ("completing", "waiting")],
)  # fmt: skip
def test_backward_transitions_are_refused(old: str, new: str) -> None:
    assert not can_transition(old, new)


def test_a_non_monotonic_status_is_a_conflict_and_changes_nothing() -> None:
    state = with_tasks({"id": "t1", "kind": "tool", "status": "completed"})

    error = rejects(state, {"id": "t1", "status": "running"})

    assert (type(error), error.code, error.field) == (
        ConflictError, "invalid_transition", "tasks[0].status",
    )  # fmt: skip


def test_a_task_is_created_with_defaults_and_updated_in_place() -> None:
    state = with_tasks({"id": "t1", "kind": "tool"})
    assert state["tasks"]["t1"] == {
        "id": "t1", "kind": "tool", "version": None, "status": "pending", "phase": None,
        "parent": None, "children": [], "created_at": T0, "updated_at": T0, "reason": None,
    }  # fmt: skip

    state, _ = session.commit(
        state,
        {"tasks": [{"id": "t1", "status": "waiting", "phase": "children", "version": "2"}]},
        T1,
    )

    task = state["tasks"]["t1"]
    assert (task["status"], task["phase"], task["version"], task["updated_at"]) == (
        "waiting", "children", "2", T1,
    )  # fmt: skip


def test_children_are_derived_from_parents_in_commit_order() -> None:
    state = with_tasks(
        {"id": "root", "kind": "notice"},
        {"id": "root:mail-1", "kind": "mail", "parent": "root"},
        {"id": "root:mail-2", "kind": "mail", "parent": "root"},
    )

    assert state["tasks"]["root"]["children"] == ["root:mail-1", "root:mail-2"]
    assert state["tasks"]["root:mail-2"]["parent"] == "root"


def test_a_parent_must_exist_before_its_child() -> None:
    error = rejects(
        session.new_state("s1", T0),
        {"id": "child", "kind": "mail", "parent": "root"},
        {"id": "root", "kind": "notice"},
    )

    assert (type(error), error.code, error.field) == (
        NotFoundError,
        "unknown_parent",
        "tasks[0].parent",
    )


def test_a_new_task_needs_a_kind() -> None:
    error = rejects(session.new_state("s1", T0), {"id": "t1", "status": "running"})

    assert (type(error), error.field) == (ValidationError, "tasks[0].kind")


@pytest.mark.parametrize("field", ["kind", "parent", "version"])
def test_identity_fields_are_fixed_once_set(field: str) -> None:
    state = with_tasks(
        {"id": "p", "kind": "notice"},
        {"id": "t1", "kind": "tool", "version": "1", "parent": "p"},
    )
    other = {"kind": "mail", "parent": None, "version": "2"}[field]

    error = rejects(state, {"id": "t1", field: other})

    assert (type(error), error.code, error.field) == (
        ConflictError,
        "immutable_field",
        f"tasks[0].{field}",
    )


def test_an_unknown_status_is_rejected() -> None:
    error = rejects(session.new_state("s1", T0), {"id": "t1", "kind": "tool", "status": "done"})

    assert error.field == "tasks[0].status"


def test_a_task_under_a_failure_policy_records_its_tier() -> None:
    state = with_tasks({"id": "t1", "kind": "tool", "status": "running"})
    assert "tier" not in state["tasks"]["t1"]  # only tasks under a failure policy have one
    state, _ = session.commit(state, {"tasks": [{"id": "t1", "tier": "retried"}]}, T1)
    assert state["tasks"]["t1"]["tier"] == "retried"
    state, _ = session.commit(
        state, {"tasks": [{"id": "t1", "status": "failed", "tier": "handled"}]}, T1
    )
    assert (state["tasks"]["t1"]["status"], state["tasks"]["t1"]["tier"]) == ("failed", "handled")
    assert rejects(state, {"id": "t1", "tier": "lost"}).field.endswith("tier")
