"""Run a task kind under its ``FailurePolicy`` (``kernel/turn/failures.py``): tries with durable
backoff timers, then the kind's ``onFailure`` handler exactly once, then a tier.

``yield from run_kind(context, policy, task_id, input)`` returns the envelope
``{"ok", "tier", "attempts", "result"?, "failure"?, "last"?, "handler"?}`` and never raises for
a failure of the kind or of its handler: a caller branches on ``tier``.

A try is the activity (or sub-orchestration, ``call="orchestrator"``) named by the kind, or,
when the caller passes ``attempt``, the sub-generator ``attempt(n)``: it fails by raising,
and a failure that is a value rather than an exception raises ``TryFailed(message, value)``
so the envelope keeps the last value as ``last`` (a tool's failed result, for the model).

Progress is published in the custom status (``attempt``, then ``on_failure``, then the tier;
``publish=False`` leaves the caller's status alone), and ``progress(tier, facts)``, a
sub-generator, lets a caller record it elsewhere (a tool task's session record) after each
failed try that will be retried and before the handler starts. The three tiers are so
visible per task while it runs and after.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from datetime import timedelta
from typing import Any

import azure.durable_functions as df

from kernel.turn import failures
from orchestrators.steps import child_version, set_status

Gen = Generator[Any, Any, Any]
Attempt = Callable[[int], Gen]
Progress = Callable[[str, dict[str, Any]], Gen]


class TryFailed(Exception):
    """A try that ended in a failure value; ``value`` is kept as the envelope's ``last``."""

    def __init__(self, message: str, value: Any = None) -> None:
        super().__init__(message)
        self.value = value


def _call(
    context: df.DurableOrchestrationContext,
    policy: failures.FailurePolicy,
    task_id: str,
    attempt: int,
    payload: Any,
) -> Gen:
    if policy.call == "orchestrator":
        child = f"{task_id}:try:{attempt}"
        return (
            yield context.call_sub_orchestrator(
                policy.kind, payload, child, version=child_version(context)
            )
        )
    return (yield context.call_activity(policy.kind, payload))


def run_kind(
    context: df.DurableOrchestrationContext,
    policy: failures.FailurePolicy,
    task_id: str,
    payload: Any,
    attempt: Attempt | None = None,
    publish: bool = True,
    progress: Progress | None = None,
) -> Gen:
    def status(phase: str, **fields: Any) -> None:
        if publish:
            set_status(context, phase, kind=policy.kind, **fields)

    failure, last, tried = "", None, 0
    for tried in range(1, policy.max_attempts + 1):
        status("attempt", attempt=tried)
        try:
            if attempt is None:
                result = yield from _call(context, policy, task_id, tried, payload)
            else:
                result = yield from attempt(tried)
        except Exception as exc:  # noqa: BLE001 - a failed try is data here
            failure, last = str(exc), getattr(exc, "value", None)
            delay = policy.delay_after(tried)
            if delay is None:
                break
            if progress is not None:
                yield from progress("retried", {"attempt": tried, "failure": failure})
            yield context.create_timer(context.current_utc_datetime + timedelta(seconds=delay))
            continue
        tier = failures.tier(True, tried, None)
        status(tier, attempts=tried)
        return {"ok": True, "tier": tier, "attempts": tried, "result": result}
    handled: bool | None = None
    handler: dict[str, Any] | None = None
    if policy.on_failure:
        status("on_failure", attempts=tried, handler=policy.on_failure)
        if progress is not None:
            yield from progress("retried", {"attempt": tried, "failure": failure, "handler": True})
        try:
            output = yield context.call_sub_orchestrator(
                policy.on_failure,
                failures.handler_input(policy, task_id, payload, failure, tried),
                failures.handler_instance_id(task_id),
                version=child_version(context),
            )
            handled, handler = True, {"name": policy.on_failure, "result": output}
        except Exception as exc:  # noqa: BLE001 - a failed handler means a person must look
            handled, handler = False, {"name": policy.on_failure, "failure": str(exc)[:2000]}
    tier = failures.tier(False, tried, handled)
    status(tier, attempts=tried, failure=failure[:500])
    envelope: dict[str, Any] = {
        "ok": False,
        "tier": tier,
        "attempts": tried,
        "failure": failure[:2000],
    }
    if last is not None:
        envelope["last"] = last
    if handler is not None:
        envelope["handler"] = handler
    return envelope
