"""Pure decisions of the agent-turn orchestrator: limits, retries, guards and tool replay.

No clock, no IO: the orchestrator passes everything in (attempt numbers, envelopes, token
counts, the attempt record's state) and turns the answers into durable steps (timers,
activities, commits).

Contract:
* ``TurnLimits.from_settings(app_settings)`` reads ``AGENT_<FIELD>`` settings (``AGENT_MAX_ROUNDS``,
  ``AGENT_MODEL_TIMEOUT_S``, ``AGENT_APPROVAL_TIMEOUT_S``, ``AGENT_ATTENTION_TIMEOUT_S``,
  ``AGENT_MAX_CONCURRENT_MODEL_CALLS``, ``AGENT_TOOL_LEASE_S``, ``AGENT_MODEL_BACKGROUND`` ...)
  with defaults; a bad value raises ``TurnSettingsError`` naming the setting.
  ``to_dict``/``from_dict`` carry limits through orchestration input as JSON.
  ``with_policy(policy)`` lays one run's own policy (a loop's ``policy``: field names as in
  ``to_dict``) over them; an unknown field, or one of ``DEPLOYMENT_ONLY``, raises
  ``TurnSettingsError`` naming it.
* ``next_retry_delay(attempt, result, limits)``: seconds to wait before the next model attempt,
  or None when there must be none (success, ``fatal``, or ``max_model_attempts`` used up).
  The delay is ``base * 2**(attempt-1)`` capped at ``max_backoff_s``, except that a
  ``rate_limited`` envelope's ``retry_after`` is used as given: retrying sooner only earns
  another 429, and the attempt cap still bounds the total. No jitter: the delay becomes a
  durable timer in a replayed orchestration, so it must be a function of history.
* ``check_guards(round_no, response, tokens_used, limits)``: None, or
  ``{"reason": "max_rounds"|"max_tool_calls"|"token_budget", "message"}`` when the turn must
  stop instead of running the response's tool calls. A final answer (no tool calls) is never
  stopped: it is already paid for and ends the turn anyway. ``round_no`` is 1-based;
  ``tokens_used`` is the turn's total including this response. Checked in that order.
* ``replay_decision(saved_policy, current_policy, attempt_state)`` is the attempt-ledger rule
  that closes the "tool ran but its result was not saved" window; see the table on it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import Field, asdict, dataclass, fields
from typing import Any, Literal, TypedDict, TypeGuard

from kernel.turn.model_io import (
    ModelFailure,
    ModelResponse,
    ModelResult,
    ModelSuccess,
    result_from_dict,
)
from kernel.turn.tools import ToolPolicy

SETTING_PREFIX = "AGENT_"
# Bounds shared by every run of the deployment: one run's policy cannot change them (the
# model-call semaphore's limit is global, a run asking for more would raise it for all).
DEPLOYMENT_ONLY = frozenset({"max_concurrent_model_calls"})

AttemptState = Literal["absent", "completed", "leased", "expired"]
ReplayDecision = Literal["run", "wait", "interrupted", "reuse_result"]
GuardReason = Literal["max_rounds", "max_tool_calls", "token_budget"]


class TurnSettingsError(ValueError):
    """A turn limit setting is malformed or out of range; ``setting`` names it."""

    def __init__(self, setting: str, problem: str) -> None:
        super().__init__(f"{setting}: {problem}")
        self.setting = setting
        self.problem = problem


class GuardStop(TypedDict):
    reason: GuardReason
    message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnLimits:
    """Bounds of one agent turn. Invalid combinations cannot be constructed."""

    max_rounds: int = 8
    max_tool_calls_per_round: int = 8
    token_budget: int = 200_000
    model_timeout_s: float = 120.0
    tool_timeout_s: float = 300.0
    max_model_attempts: int = 5
    base_backoff_s: float = 2.0
    max_backoff_s: float = 60.0
    # How long a tool that needs a person waits for a decision before it counts as rejected.
    approval_timeout_s: float = 3600.0
    # How long a turn parked as needs_attention waits for an operator before it fails.
    attention_timeout_s: float = 604_800.0
    # Model calls running at once across all sessions (the model-call semaphore).
    max_concurrent_model_calls: int = 4
    # Lease of a tool attempt record; a running tool renews it, a crashed one lets it expire.
    tool_lease_s: float = 30.0
    # 1: model calls are background requests (a handle, then durable polls; docs/turn.md).
    model_background: int = 0
    # Background polls: the first waits model_poll_s, each next one twice as long up to
    # model_max_poll_s; a request unanswered after model_background_timeout_s is cancelled.
    model_poll_s: float = 2.0
    model_max_poll_s: float = 30.0
    model_background_timeout_s: float = 3600.0

    def __post_init__(self) -> None:
        for spec in fields(self):
            _check_limit(spec.name, getattr(self, spec.name), integer=_is_whole(spec))
        if self.base_backoff_s > self.max_backoff_s:
            raise TurnSettingsError("base_backoff_s", "must not exceed the maximum backoff")
        if self.model_background not in (0, 1):
            raise TurnSettingsError("model_background", "must be 0 (off) or 1 (on)")
        if self.model_poll_s > self.model_max_poll_s:
            raise TurnSettingsError("model_poll_s", "must not exceed the maximum poll interval")

    @classmethod
    def from_settings(cls, settings: Mapping[str, object]) -> TurnLimits:
        """Limits from app settings (strings or numbers); missing or blank means default."""
        return cls._build(settings, lambda name: SETTING_PREFIX + name.upper())

    @classmethod
    def from_dict(cls, raw: Mapping[str, object]) -> TurnLimits:
        """The inverse of ``to_dict``; missing fields take their defaults."""
        return cls._build(raw, lambda name: name)

    def to_dict(self) -> dict[str, int | float]:
        return asdict(self)

    def with_policy(self, policy: Mapping[str, object] | None) -> TurnLimits:
        """These limits with a run's own policy laid over them (None or empty: unchanged)."""
        if not policy:
            return self
        known = {spec.name for spec in fields(self)} - DEPLOYMENT_ONLY
        for name in sorted(policy):
            if name not in known:
                raise TurnSettingsError(
                    name, f"not a turn policy field; use {', '.join(sorted(known))}"
                )
        return TurnLimits.from_dict({**self.to_dict(), **policy})

    @classmethod
    def _build(cls, source: Mapping[str, object], key_of: Callable[[str], str]) -> TurnLimits:
        values: dict[str, Any] = {}  # each value is checked by _parse, then by __post_init__
        for spec in fields(cls):
            raw = source.get(key_of(spec.name))
            if raw is None or (isinstance(raw, str) and not raw.strip()):
                continue
            values[spec.name] = _parse(key_of(spec.name), raw, integer=_is_whole(spec))
        try:
            return cls(**values)
        except TurnSettingsError as exc:  # name the key the caller would edit
            raise TurnSettingsError(key_of(exc.setting), exc.problem) from exc


def next_retry_delay(
    attempt: int, result: ModelResult | Mapping[str, object], limits: TurnLimits
) -> float | None:
    """Seconds before model attempt ``attempt + 1``, or None if there must be none."""
    if attempt < 1:
        raise ValueError(f"attempt numbers start at 1, not {attempt}")
    envelope = (
        result if isinstance(result, ModelSuccess | ModelFailure) else result_from_dict(result)
    )
    if not isinstance(envelope, ModelFailure) or envelope.kind == "fatal":
        return None
    if attempt >= limits.max_model_attempts:
        return None
    if envelope.kind == "rate_limited" and envelope.retry_after is not None:
        return envelope.retry_after
    # The exponent is capped only to keep the float finite; max_backoff_s caps the delay.
    return min(limits.max_backoff_s, limits.base_backoff_s * 2.0 ** min(attempt - 1, 64))


def check_guards(
    round_no: int, response: ModelResponse, tokens_used: int, limits: TurnLimits
) -> GuardStop | None:
    """Why the turn must stop instead of running ``response``'s tool calls, or None."""
    calls = len(response.tool_calls)
    if calls == 0:
        return None
    if round_no >= limits.max_rounds:
        return GuardStop(
            reason="max_rounds",
            message=f"round {round_no} of at most {limits.max_rounds} asked for tools; "
            "no round is left to use their results",
        )
    if calls > limits.max_tool_calls_per_round:
        return GuardStop(
            reason="max_tool_calls",
            message=f"{calls} tool calls in one round; the limit is "
            f"{limits.max_tool_calls_per_round}",
        )
    if tokens_used > limits.token_budget:
        return GuardStop(
            reason="token_budget",
            message=f"{tokens_used} tokens used; the budget is {limits.token_budget}",
        )
    return None


def replay_decision(
    saved_policy: ToolPolicy | None,
    current_policy: ToolPolicy | None,
    attempt_state: AttemptState,
) -> ReplayDecision:
    """What a tool activity does with its attempt record ``{submission}:{round}:{call}:{attempt}``.

    ==========  =====================================  =====================================
    state       the attempt record                     decision
    ==========  =====================================  =====================================
    absent      does not exist                         ``run`` (the activity creates it)
    completed   holds a result                         ``reuse_result``: never run twice
    leased      no result, lease still live            ``wait``: another execution is running
                                                       (Azure may deliver an activity twice)
    expired     no result, lease expired: a crash      ``run`` again only if the saved *and*
                left the outcome unknown               the current policy are both ``safe``,
                                                       else ``interrupted``
    ==========  =====================================  =====================================

    A policy of None (intent saved without one, or the tool has left the catalogue) is not safe.
    """
    match attempt_state:
        case "absent":
            return "run"
        case "completed":
            return "reuse_result"
        case "leased":
            return "wait"
        case "expired":
            both_safe = saved_policy == "safe" and current_policy == "safe"
            return "run" if both_safe else "interrupted"
        case _:  # the state may come from JSON, so the type is not a guarantee
            raise ValueError(f"unknown attempt state {attempt_state!r}")


def _parse(key: str, raw: object, *, integer: bool) -> int | float:
    if isinstance(raw, str):
        try:
            return int(raw.strip()) if integer else float(raw.strip())
        except ValueError:
            pass
    elif _is_number(raw) and (isinstance(raw, int) or not integer):
        return raw
    raise TurnSettingsError(key, f"must be {_kind(integer)}, not {raw!r}")


def _check_limit(name: str, value: object, *, integer: bool) -> None:
    if not _is_number(value) or (integer and not isinstance(value, int)):
        raise TurnSettingsError(name, f"must be {_kind(integer)}, not {value!r}")
    if not math.isfinite(value) or value < 0:
        raise TurnSettingsError(name, f"must be finite and not negative, not {value!r}")
    # Zero base backoff means "retry at once", which tests and local runs want; zero
    # model_background is "off".
    if value == 0 and name not in ("base_backoff_s", "model_background"):
        raise TurnSettingsError(name, "must be greater than 0")


def _is_whole(spec: Field[object]) -> bool:
    return isinstance(spec.default, int)


def _kind(integer: bool) -> str:
    return "a whole number" if integer else "a number"


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)
