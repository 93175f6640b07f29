"""Turn limits, retry delays, guards and the attempt-ledger replay rule."""

from __future__ import annotations

from typing import cast

import pytest

from kernel.turn.model_io import ModelFailure, ModelResponse, ModelSuccess, ToolCall
from kernel.turn.policy import (
    AttemptState,
    TurnLimits,
    TurnSettingsError,
    check_guards,
    next_retry_delay,
    replay_decision,
)
from kernel.turn.tools import ToolPolicy

LIMITS = TurnLimits(
    max_rounds=3,
    max_tool_calls_per_round=2,
    token_budget=1000,
    max_model_attempts=4,
    base_backoff_s=1.0,
    max_backoff_s=5.0,
)
TRANSIENT = ModelFailure(kind="transient", message="502")


def _response(calls: int) -> ModelResponse:
    tool_calls = tuple(ToolCall(f"c{i}", "calculator", {"expression": "1"}) for i in range(calls))
    return ModelResponse(content=None if calls else "done", tool_calls=tool_calls)


# --- settings ---------------------------------------------------------------------------


def test_defaults_apply_when_settings_are_missing_or_blank() -> None:
    assert TurnLimits.from_settings({}) == TurnLimits()
    assert TurnLimits.from_settings({"AGENT_MAX_ROUNDS": "  "}) == TurnLimits()


def test_settings_are_parsed_from_strings_and_numbers() -> None:
    limits = TurnLimits.from_settings(
        {
            "AGENT_MAX_ROUNDS": " 3 ",
            "AGENT_MODEL_TIMEOUT_S": "2.5",
            "AGENT_TOKEN_BUDGET": 500,
            "AGENT_BASE_BACKOFF_S": "0",
            "UNRELATED_SETTING": "ignored",
        }
    )

    assert (limits.max_rounds, limits.model_timeout_s, limits.token_budget) == (3, 2.5, 500)
    assert limits.base_backoff_s == 0


@pytest.mark.parametrize(
    ("settings", "setting"),
    [
        ({"AGENT_MAX_ROUNDS": "many"}, "AGENT_MAX_ROUNDS"),
        ({"AGENT_MAX_ROUNDS": "2.5"}, "AGENT_MAX_ROUNDS"),
        ({"AGENT_MAX_ROUNDS": "0"}, "AGENT_MAX_ROUNDS"),
        ({"AGENT_TOKEN_BUDGET": True}, "AGENT_TOKEN_BUDGET"),
        ({"AGENT_TOOL_TIMEOUT_S": "-1"}, "AGENT_TOOL_TIMEOUT_S"),
        ({"AGENT_MODEL_TIMEOUT_S": "nan"}, "AGENT_MODEL_TIMEOUT_S"),
        ({"AGENT_MAX_BACKOFF_S": "inf"}, "AGENT_MAX_BACKOFF_S"),
        ({"AGENT_BASE_BACKOFF_S": "90"}, "AGENT_BASE_BACKOFF_S"),
        ({"AGENT_MODEL_BACKGROUND": "2"}, "AGENT_MODEL_BACKGROUND"),
        ({"AGENT_MODEL_BACKGROUND": "yes"}, "AGENT_MODEL_BACKGROUND"),
        ({"AGENT_MODEL_POLL_S": "0"}, "AGENT_MODEL_POLL_S"),
        ({"AGENT_MODEL_POLL_S": "31"}, "AGENT_MODEL_POLL_S"),
    ],
)
def test_bad_settings_are_rejected_naming_the_setting(
    settings: dict[str, object], setting: str
) -> None:
    with pytest.raises(TurnSettingsError, match=setting) as raised:
        TurnLimits.from_settings(settings)

    assert raised.value.setting == setting


def test_limits_round_trip_as_a_dict() -> None:
    assert TurnLimits.from_dict(LIMITS.to_dict()) == LIMITS


def test_limits_cannot_be_built_invalid() -> None:
    with pytest.raises(TurnSettingsError, match="max_rounds"):
        TurnLimits(max_rounds=0)


# --- retries ----------------------------------------------------------------------------


def test_backoff_doubles_from_the_base_and_is_capped() -> None:
    limits = TurnLimits(max_model_attempts=10, base_backoff_s=1.0, max_backoff_s=5.0)

    delays = [next_retry_delay(attempt, TRANSIENT, limits) for attempt in range(1, 6)]

    assert delays == [1.0, 2.0, 4.0, 5.0, 5.0]


def test_no_retry_once_the_attempts_are_used_up() -> None:
    assert next_retry_delay(3, TRANSIENT, LIMITS) == 4.0
    assert next_retry_delay(4, TRANSIENT, LIMITS) is None


@pytest.mark.parametrize("kind", ["transient", "timeout", "rate_limited"])
def test_retryable_kinds_get_a_delay(kind: str) -> None:
    envelope = {"ok": False, "kind": kind, "message": "m", "retry_after": None}

    assert next_retry_delay(1, envelope, LIMITS) == 1.0


def test_fatal_failures_and_successes_are_never_retried() -> None:
    assert next_retry_delay(1, ModelFailure(kind="fatal", message="401"), LIMITS) is None
    assert next_retry_delay(1, ModelSuccess(_response(0)), LIMITS) is None


def test_retry_after_is_honoured_as_given() -> None:
    longer = ModelFailure(kind="rate_limited", message="429", retry_after=30.0)
    shorter = ModelFailure(kind="rate_limited", message="429", retry_after=0.25)

    assert next_retry_delay(1, longer, LIMITS) == 30.0  # above max_backoff_s: still honoured
    assert next_retry_delay(3, shorter, LIMITS) == 0.25
    assert next_retry_delay(4, longer, LIMITS) is None  # the attempt cap still applies


def test_retry_after_on_other_kinds_is_ignored() -> None:
    envelope = ModelFailure(kind="transient", message="503", retry_after=30.0)

    assert next_retry_delay(1, envelope, LIMITS) == 1.0


def test_a_huge_attempt_number_stays_finite() -> None:
    limits = TurnLimits(max_model_attempts=10_000, max_backoff_s=5.0, base_backoff_s=1.0)

    assert next_retry_delay(5000, TRANSIENT, limits) == 5.0


def test_attempts_are_counted_from_one() -> None:
    with pytest.raises(ValueError, match="start at 1"):
        next_retry_delay(0, TRANSIENT, LIMITS)


# --- guards -----------------------------------------------------------------------------


def test_tool_calls_within_limits_pass() -> None:
    assert check_guards(2, _response(2), 1000, LIMITS) is None


def test_a_final_answer_is_never_stopped() -> None:
    assert check_guards(99, _response(0), 10**9, LIMITS) is None


def test_tool_calls_in_the_last_round_stop_the_turn() -> None:
    stop = check_guards(3, _response(1), 10, LIMITS)

    assert stop is not None
    assert stop["reason"] == "max_rounds"
    assert "3" in stop["message"]


def test_too_many_tool_calls_in_one_round_stop_the_turn() -> None:
    stop = check_guards(1, _response(3), 10, LIMITS)

    assert stop is not None
    assert stop["reason"] == "max_tool_calls"


def test_exceeding_the_token_budget_stops_the_turn() -> None:
    stop = check_guards(1, _response(1), 1001, LIMITS)

    assert stop is not None
    assert stop["reason"] == "token_budget"
    assert "1001" in stop["message"]


def test_guards_are_checked_in_documented_order() -> None:
    stop = check_guards(3, _response(3), 5000, LIMITS)

    assert stop is not None
    assert stop["reason"] == "max_rounds"


# --- replay -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("saved", "current", "state", "decision"),
    [
        ("safe", "safe", "absent", "run"),
        ("unsafe", "unsafe", "absent", "run"),
        ("unsafe", "unsafe", "completed", "reuse_result"),
        ("safe", "safe", "completed", "reuse_result"),
        ("unsafe", "unsafe", "leased", "wait"),
        ("safe", "safe", "leased", "wait"),
        ("safe", "safe", "expired", "run"),
        ("safe", "unsafe", "expired", "interrupted"),
        ("unsafe", "safe", "expired", "interrupted"),
        ("unsafe", "unsafe", "expired", "interrupted"),
        ("safe", None, "expired", "interrupted"),
    ],
)
def test_replay_follows_the_attempt_ledger_rule(
    saved: ToolPolicy, current: ToolPolicy | None, state: AttemptState, decision: str
) -> None:
    assert replay_decision(saved, current, state) == decision


def test_an_unknown_attempt_state_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown attempt state"):
        replay_decision("safe", "safe", cast(AttemptState, "lost"))


def test_a_runs_policy_is_laid_over_the_limits() -> None:
    base = TurnLimits(max_rounds=8, token_budget=1000)
    narrowed = base.with_policy({"max_rounds": 2})
    assert (narrowed.max_rounds, narrowed.token_budget) == (2, 1000)
    assert base.with_policy(None) is base and base.with_policy({}) is base
    for policy, setting in (
        ({"max_rounds": 0}, "max_rounds"),
        ({"rounds": 2}, "rounds"),
        ({"max_concurrent_model_calls": 1}, "max_concurrent_model_calls"),
    ):
        with pytest.raises(TurnSettingsError) as caught:
            base.with_policy(policy)
        assert caught.value.setting == setting
