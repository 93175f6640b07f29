"""The poll schedule of a background model call: pure, so it replays identically."""

from __future__ import annotations

import pytest

from kernel.turn.policy import TurnLimits
from orchestrators.model_wait import PollSchedule, next_wait, poll_delay


def test_polls_start_at_the_first_delay_and_double_up_to_the_cap() -> None:
    assert [poll_delay(n, 2.0, 30.0) for n in range(1, 7)] == [2, 4, 8, 16, 30, 30]


def test_a_huge_poll_number_stays_finite() -> None:
    assert poll_delay(10_000, 2.0, 30.0) == 30.0


def test_polls_are_counted_from_one() -> None:
    with pytest.raises(ValueError, match="start at 1"):
        poll_delay(0, 2.0, 30.0)


def test_the_last_sleep_ends_at_the_deadline_and_none_follows_it() -> None:
    schedule = PollSchedule(first_s=2.0, max_s=30.0, timeout_s=100.0)

    assert next_wait(5, 80.0, schedule) == 20.0  # 30 s due, 20 s left
    assert next_wait(1, 0.0, schedule) == 2.0
    assert next_wait(6, 100.0, schedule) is None
    assert next_wait(6, 130.0, schedule) is None


def test_the_schedule_comes_from_the_turn_limits() -> None:
    limits = TurnLimits.from_settings(
        {
            "AGENT_MODEL_POLL_S": "0.5",
            "AGENT_MODEL_MAX_POLL_S": "4",
            "AGENT_MODEL_BACKGROUND_TIMEOUT_S": "600",
        }
    )

    assert PollSchedule.of(limits) == PollSchedule(first_s=0.5, max_s=4.0, timeout_s=600.0)


def test_a_retry_after_from_the_provider_stretches_the_next_sleep_but_not_the_deadline() -> None:
    schedule = PollSchedule(first_s=2.0, max_s=30.0, timeout_s=100.0)

    assert next_wait(1, 0.0, schedule, at_least=7.0) == 7.0
    assert next_wait(5, 0.0, schedule, at_least=7.0) == 30.0  # the schedule is longer anyway
    assert next_wait(1, 95.0, schedule, at_least=7.0) == 5.0
