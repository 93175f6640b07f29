"""Per-kind failure handling: retries, then an ``onFailure`` handler, then a person. Pure.

A task kind (an activity or a sub-orchestration) declares how often it is tried and which
handler runs when every try failed:

    FailurePolicy(kind="charge_card", max_attempts=3, first_retry_s=5, on_failure="refund_charge")

``orchestrators/failures.run_kind`` runs the kind under its policy. The outcome names one of
three tiers, so anyone reading a task sees how far it got:

* ``ok``               succeeded on the first try;
* ``retried``          succeeded after at least one failed try;
* ``handled``          every try failed and the handler ran and succeeded (compensated,
                       a person was notified ...);
* ``needs_attention``  every try failed and there is no handler, or the handler failed too.

The handler receives ``{"kind", "input", "failure", "attempts", "task_id"}`` - the original
input and the last failure - and runs exactly once per task: it is a sub-orchestration with the
instance id ``{task_id}:on-failure`` (``handler_instance_id``), recorded in the caller's history,
so a replay never starts it again and a second start of the same id is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from kernel.common.errors import ValidationError

Tier = Literal["ok", "retried", "handled", "needs_attention"]
TIERS: tuple[str, ...] = ("ok", "retried", "handled", "needs_attention")


@dataclass(frozen=True)
class FailurePolicy:
    kind: str
    max_attempts: int = 3
    first_retry_s: float = 5.0
    backoff: float = 2.0
    max_retry_s: float = 300.0
    on_failure: str | None = None  # the handler orchestration's name
    call: Literal["activity", "orchestrator"] = "activity"

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValidationError("invalid_policy", "max_attempts must be >= 1", "max_attempts")
        if self.first_retry_s < 0 or self.backoff < 1:
            raise ValidationError("invalid_policy", "retry delays must not shrink", "backoff")

    def delay_after(self, attempt: int) -> float | None:
        """Seconds to wait after failed try ``attempt`` (1-based); None when none is left."""
        if attempt >= self.max_attempts:
            return None
        return min(self.max_retry_s, self.first_retry_s * self.backoff ** (attempt - 1))


def handler_instance_id(task_id: str) -> str:
    return f"{task_id}:on-failure"


def handler_input(
    policy: FailurePolicy, task_id: str, original: Any, failure: str, attempts: int
) -> dict[str, Any]:
    return {
        "kind": policy.kind,
        "task_id": task_id,
        "input": original,
        "failure": failure[:2000],
        "attempts": attempts,
    }


def tier(succeeded: bool, attempts: int, handled: bool | None) -> Tier:
    """``handled``: None when no handler ran, else whether it succeeded."""
    if succeeded:
        return "ok" if attempts == 1 else "retried"
    return "handled" if handled else "needs_attention"
