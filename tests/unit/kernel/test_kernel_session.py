import json
import random
from typing import Any

import pytest

from kernel.common import ids
from kernel.common.errors import KernelError, ValidationError
from kernel.session import reducer as session

T0 = "2025-01-01T00:00:00Z"
T1 = "2025-01-01T00:00:01Z"


def test_unknown_operations_are_rejected() -> None:
    with pytest.raises(ValidationError) as caught:
        session.apply(session.new_state("s1", T0), "delete_everything", {}, T0)

    assert (caught.value.code, caught.value.field) == ("unknown_operation", "operation")


def test_a_request_must_be_a_json_object() -> None:
    with pytest.raises(ValidationError, match="invalid_request"):
        session.apply(session.new_state("s1", T0), "accept", ["r1", "hi"], T0)


def test_a_mutating_operation_needs_a_utc_now() -> None:
    with pytest.raises(ValidationError) as caught:
        session.apply(
            session.new_state("s1", T0), "accept", {"request_id": "r", "text": "x"}, "now"
        )

    assert caught.value.field == "now"


@pytest.mark.parametrize(
    ("op", "request_"),
    [("view", None), ("is_idle", {}), ("changes_after", {"after": 0}),
     ("submission_view", {"submission_id": ids.submission_id("s1", "r1")})],
)  # fmt: skip
def test_reads_return_the_state_object_itself(op: str, request_: Any) -> None:
    state, _ = session.accept(session.new_state("s1", T0), {"request_id": "r1", "text": "x"}, T0)

    same, _ = session.apply(state, op, request_, T1)

    assert same is state


def test_the_view_is_a_copy_of_everything_but_the_change_log() -> None:
    state, _ = session.accept(session.new_state("s1", T0), {"request_id": "r1", "text": "x"}, T0)

    view = session.view(state)
    view["entries"].clear()

    assert "changes" not in view
    assert view["cursor"] == 1
    assert len(state["entries"]) == 1


def test_a_session_is_idle_without_active_or_queued_submissions() -> None:
    state = session.new_state("s1", T0)
    assert session.is_idle(state)

    state, result = session.accept(state, {"request_id": "r1", "text": "x"}, T0)
    assert not session.is_idle(state)

    state, _ = session.finish(
        state, {"submission_id": result["submission_id"], "status": "failed"}, T1
    )
    assert session.is_idle(state)


def random_operation(rng: random.Random, state: dict[str, Any]) -> tuple[str, Any]:
    """A mix of valid and invalid requests over a small id space, so conflicts happen."""
    subs = [*state["submissions"], "missing"]
    tasks = [*state["tasks"], "t0", "t1"]
    status = rng.choice(["pending", "running", "completed", "failed", "waiting"])
    final = rng.choice(["completed", "failed"])
    return rng.choice([
        ("accept", {"request_id": f"r{rng.randrange(6)}", "text": rng.choice(["hi", "", "ok"])}),
        ("finish", {"submission_id": rng.choice(subs), "status": final}),
        ("cancel", {"submission_id": rng.choice(subs)}),
        ("commit", {"submission_id": rng.choice(subs),
                    "entries": [{"role": rng.choice(["assistant", "tool", "bot"]), "text": "x"}]}),
        ("commit", {"documents": [{"id": "d", "type": "json", "data": rng.randrange(3),
                                   "expected_version": rng.randrange(3)}]}),
        ("commit", {"tasks": [{"id": rng.choice(tasks), "kind": "tool", "status": status,
                               "parent": rng.choice([None, *tasks])}]}),
    ])  # fmt: skip


@pytest.mark.parametrize("seed", range(5))
def test_any_sequence_of_operations_keeps_the_reducer_contract(seed: int) -> None:
    rng = random.Random(seed)
    state = session.new_state("s1", T0)

    for _ in range(150):
        op, request = random_operation(rng, state)
        before = json.dumps(state)
        try:
            new, _ = session.apply(state, op, request, T1)
        except KernelError:
            assert json.dumps(state) == before
            continue

        assert json.dumps(state) == before
        assert new is state or new["cursor"] == state["cursor"] + 1
        assert new["active_submission"] is not None or not new["turn_queue"]
        assert len(set(new["turn_queue"])) == len(new["turn_queue"])
        state = new
