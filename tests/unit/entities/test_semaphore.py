"""The model-call semaphore's pure steps."""

from __future__ import annotations

from entities.semaphore import apply, new_state


def acquire(state, holder, now=0.0, limit=1, lease_s=10.0):
    return apply(
        state,
        "acquire",
        {
            "holder": holder,
            "instance_id": f"i-{holder}",
            "event": f"slot:{holder}",
            "limit": limit,
            "lease_s": lease_s,
        },
        now,
    )


def test_holders_up_to_the_limit_then_a_line_in_order():
    state, a = acquire(new_state(), "a", limit=2)
    state, b = acquire(state, "b", limit=2)
    state, c = acquire(state, "c", limit=2)
    state, d = acquire(state, "d", limit=2)

    assert (a["granted"], b["granted"], c, d) == (
        True,
        True,
        {"granted": False, "position": 1},
        {"granted": False, "position": 2},
    )


def test_a_release_hands_the_slot_to_the_first_waiter():
    state, _ = acquire(new_state(), "a")
    state, _ = acquire(state, "b")

    state, released = apply(state, "release", {"holder": "a"}, 1.0)
    state, again = acquire(state, "b")

    assert released == {"wake": [{"instance_id": "i-b", "event": "slot:b", "holder": "b"}]}
    assert again == {"granted": True, "position": 0}  # asking again is harmless


def test_a_dead_holders_slot_comes_back_when_its_lease_runs_out():
    state, _ = acquire(new_state(), "a", lease_s=5)

    _, early = acquire(state, "b", now=4)
    _, late = acquire(state, "b", now=6)

    assert early["granted"] is False and late["granted"] is True


def test_a_waiter_keeps_its_place_when_it_waits_again():
    state, _ = acquire(new_state(), "a")
    state, _ = acquire(state, "b")
    state, _ = acquire(state, "c")
    state, b_again = acquire(state, "b")

    assert b_again["position"] == 1


def test_reads_and_unknown_operations_change_nothing():
    state = new_state()

    assert apply(state, "view", {}, 0)[0] is state
    assert apply(state, "nope", {}, 0) == (
        state,
        {"ok": False, "error": "unknown operation 'nope'"},
    )


def test_the_time_is_the_callers_and_never_goes_back():
    from entities.semaphore import caller_time

    state = {**new_state(), "clock": 1000.0}
    assert caller_time(state, {"now": "1970-01-01T00:20:00+00:00"}) == 1200.0
    assert caller_time(state, {"now": "1970-01-01T00:20:00"}) == 1200.0  # naive means UTC
    assert caller_time(state, {"now": "1970-01-01T00:10:00Z"}) == 1000.0  # a late caller
    assert caller_time(state, {}) == 1000.0  # a caller that sends no time
    assert caller_time(new_state(), {}) == 0.0
