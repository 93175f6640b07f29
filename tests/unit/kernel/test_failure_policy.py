"""Per-kind failure policies, the pure part: delays, tiers, the handler's id and input."""

from __future__ import annotations

import pytest

from kernel.common.errors import ValidationError
from kernel.turn import failures


def test_delays_grow_and_stop_after_the_last_try() -> None:
    policy = failures.FailurePolicy("k", max_attempts=4, first_retry_s=1, backoff=3, max_retry_s=5)
    assert [policy.delay_after(n) for n in (1, 2, 3, 4)] == [1, 3, 5, None]


def test_the_tiers() -> None:
    assert failures.tier(True, 1, None) == "ok"
    assert failures.tier(True, 3, None) == "retried"
    assert failures.tier(False, 3, True) == "handled"
    assert failures.tier(False, 3, False) == "needs_attention"
    assert failures.tier(False, 3, None) == "needs_attention"


def test_the_handler_gets_the_original_input_and_a_stable_id() -> None:
    policy = failures.FailurePolicy("charge", on_failure="refund")
    given = failures.handler_input(policy, "t1", {"amount": 5}, "declined" * 500, 3)
    assert given["input"] == {"amount": 5} and given["kind"] == "charge"
    assert len(given["failure"]) == 2000
    assert failures.handler_instance_id("t1") == "t1:on-failure"


def test_a_policy_without_tries_is_refused() -> None:
    with pytest.raises(ValidationError):
        failures.FailurePolicy("k", max_attempts=0)
