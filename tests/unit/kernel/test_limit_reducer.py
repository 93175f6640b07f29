"""Per-key limits, the pure reducer: order, exactly once, leases, rate windows, debounce."""

from __future__ import annotations

from typing import Any

import pytest

from kernel.common import limits
from kernel.common.errors import ValidationError


def ask(state: dict[str, Any], holder: str, now: float, first: bool = True, **decl: Any):
    request = {
        "holder": holder,
        "instance_id": holder,
        "event": f"e:{holder}",
        "first": first,
        **decl,
    }
    return limits.apply(state, "acquire", request, now)


def test_twenty_requests_with_limit_one_run_once_each_in_arrival_order() -> None:
    single = limits.parse_limit({"key": "k", "limit": 1}).request()
    state = limits.new_state()
    granted = []
    for n in range(20):
        state, answer = ask(state, f"h{n}", 0.0, **single)
        if answer["granted"]:
            granted.append(f"h{n}")
        else:
            assert answer["position"] == n  # queued once, in order
        assert answer["ticket"] == n + 1  # numbered in arrival order
    state, again = ask(state, "h5", 0.5, **single)  # asking again keeps the place
    assert again == {"granted": False, "position": 5, "retry_at": single["lease_s"], "ticket": 6}
    running = granted[:]
    order = granted[:]
    tickets = [1]
    while running:
        state, released = limits.apply(state, "release", {"holder": running.pop()}, 1.0)
        woken = [w["holder"] for w in released["wake"]]
        assert len(woken) <= 1
        running += woken
        order += woken
        tickets += [w["ticket"] for w in released["wake"]]
    assert order == [f"h{n}" for n in range(20)]
    assert tickets == list(range(1, 21))  # the grants follow the tickets
    assert state["holders"] == {} and state["waiters"] == []


def test_a_crashed_holder_frees_its_slot_when_its_lease_ends() -> None:
    decl = limits.parse_limit({"key": "k", "limit": 1, "lease_s": 10}).request()
    state, first = ask(limits.new_state(), "dead", 0.0, **decl)
    state, waiting = ask(state, "next", 1.0, **decl)
    assert first["granted"] and not waiting["granted"] and waiting["retry_at"] == 10.0
    state, later = ask(state, "next", 10.0, first=False, **decl)
    assert later["granted"]


def test_a_rate_limit_grants_count_per_window() -> None:
    decl = limits.parse_limit({"key": "k", "rate": {"count": 2, "window_s": 60}}).request()
    state = limits.new_state()
    answers = []
    for n, now in enumerate((0.0, 1.0, 2.0)):
        state, answer = ask(state, f"h{n}", now, **decl)
        answers.append(answer)
    assert [a["granted"] for a in answers] == [True, True, False]
    assert answers[2]["retry_at"] == 60.0
    state, late = ask(state, "h2", 60.5, first=False, **decl)
    assert late["granted"]


def test_debounce_runs_only_the_last_of_a_burst_after_the_quiet_period() -> None:
    decl = limits.parse_limit({"key": "k", "debounce_s": 5}).request()
    state = limits.new_state()
    for n, now in enumerate((0.0, 1.0, 2.0)):
        state, answer = ask(state, f"h{n}", now, **decl)
        assert answer["granted"] is False and answer["retry_at"] == now + 5
    state, early = ask(state, "h2", 4.0, first=False, **decl)
    assert early["granted"] is False
    state, old = ask(state, "h0", 7.0, first=False, **decl)
    assert old["superseded"] is True
    state, last = ask(state, "h2", 7.0, first=False, **decl)
    assert last["granted"] is True
    state, twice = ask(state, "h2", 8.0, first=False, **decl)
    assert twice.get("superseded") is True  # the burst ran once


@pytest.mark.parametrize(
    ("declaration", "field"),
    [
        ({"limit": 1}, "concurrency.key"),
        ({"key": "k", "limit": 0}, "concurrency.limit"),
        ({"key": "k", "limit": 1.5}, "concurrency.limit"),
        ({"key": "k", "rate": {"count": 1}}, "concurrency.rate.window_s"),
        ({"key": "k", "debounce_s": -1}, "concurrency.debounce_s"),
        ({"key": "k", "limit": 1, "debounce_s": 1}, "concurrency"),
        ({"key": "k", "lease_s": 0}, "concurrency.lease_s"),
        ({"key": "k", "burst": 3}, "concurrency.burst"),
        ({"key": "k{"}, "concurrency.key"),
        ("one", "concurrency"),
    ],
)
def test_a_bad_declaration_names_its_field(declaration: Any, field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        limits.parse_limit(declaration)
    assert caught.value.field == field


def test_a_key_is_filled_from_the_call() -> None:
    limit = limits.parse_limit({"key": "service:{service}"})
    assert limits.render_key(limit, {"service": "mail"}) == "service:mail"
    with pytest.raises(ValidationError, match="service"):
        limits.render_key(limit, {})


def test_every_declared_tool_limit_is_valid() -> None:
    from kernel.turn.tools import TOOLS

    for spec in TOOLS.values():
        if spec.concurrency is not None:
            limits.parse_limit(spec.concurrency, f"{spec.name}.concurrency")
