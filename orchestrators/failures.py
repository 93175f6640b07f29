"""Run a task kind under its ``FailurePolicy`` (``kernel/failures.py``): tries with durable
backoff timers, then the kind's ``onFailure`` handler exactly once, then a tier.

``yield from run_kind(context, policy, task_id, input)`` returns the envelope
``{"ok", "tier", "attempts", "result"?, "failure"?, "handler"?}`` and never raises for a
failure of the kind or of its handler: a caller branches on ``tier``. Progress is published
in the custom status (``attempt``, then ``on_failure``, then the tier), so the three tiers are
visible per task while it runs and after.
"""

from __future__ import annotations

from collections.abc import Generator
from datetime import timedelta
from typing import Any

import azure.durable_functions as df

from kernel import failures
from orchestrators.steps import set_status

Gen = Generator[Any, Any, Any]


def _call(
    context: df.DurableOrchestrationContext,
    policy: failures.FailurePolicy,
    task_id: str,
    attempt: int,
    payload: Any,
) -> Any:
    if policy.call == "orchestrator":
        return context.call_sub_orchestrator(policy.kind, payload, f"{task_id}:try:{attempt}")
    return context.call_activity(policy.kind, payload)


def run_kind(
    context: df.DurableOrchestrationContext,
    policy: failures.FailurePolicy,
    task_id: str,
    payload: Any,
) -> Gen:
    failure = ""
    attempt = 0
    for attempt in range(1, policy.max_attempts + 1):
        set_status(context, "attempt", kind=policy.kind, attempt=attempt)
        try:
            result = yield _call(context, policy, task_id, attempt, payload)
        except Exception as exc:  # noqa: BLE001 - a failed try is data here
            failure = str(exc)
            delay = policy.delay_after(attempt)
            if delay is None:
                break
            yield context.create_timer(context.current_utc_datetime + timedelta(seconds=delay))
            continue
        tier = failures.tier(True, attempt, None)
        set_status(context, tier, kind=policy.kind, attempts=attempt)
        return {"ok": True, "tier": tier, "attempts": attempt, "result": result}
    handled: bool | None = None
    handler: dict[str, Any] | None = None
    if policy.on_failure:
        set_status(
            context, "on_failure", kind=policy.kind, attempts=attempt, handler=policy.on_failure
        )
        try:
            output = yield context.call_sub_orchestrator(
                policy.on_failure,
                failures.handler_input(policy, task_id, payload, failure, attempt),
                failures.handler_instance_id(task_id),
            )
            handled, handler = True, {"name": policy.on_failure, "result": output}
        except Exception as exc:  # noqa: BLE001 - a failed handler means a person must look
            handled, handler = False, {"name": policy.on_failure, "failure": str(exc)[:2000]}
    tier = failures.tier(False, attempt, handled)
    set_status(context, tier, kind=policy.kind, attempts=attempt, failure=failure[:500])
    envelope: dict[str, Any] = {
        "ok": False,
        "tier": tier,
        "attempts": attempt,
        "failure": failure[:2000],
    }
    if handler is not None:
        envelope["handler"] = handler
    return envelope
