"""Cooperative cancellation of child tasks, through the durable client.

* ``raise_cancel {instance_ids, reason}`` raises each child's own event ``cancel:{instance id}``
  (unique per waiter, see the kernel-safe SDK subset). A child checks that event before every
  side effect and stops at its next phase boundary.
* ``terminate_stragglers {instance_ids, reason}`` terminates children that did not wind down
  within the caller's grace period. A terminated child reaches its parent as a failed
  sub-orchestration, so the parent must treat its outcome as unknown unless the child recorded
  one first.

The caller records its intent to cancel before it calls either, waits for the grace period on
a durable timer (no process sleeps through it), and only then terminates. Both activities
are safe to run twice: raising the event again is harmless, and terminating a finished
instance is refused by the runtime and reported here as ``not_running``.
Returns ``{"ok": true, "report": {instance id: "raised" | "terminated" | "not_running"}}``.
"""

from __future__ import annotations

from typing import Any

import azure.durable_functions as df

bp = df.Blueprint()


def cancel_event(instance_id: str) -> str:
    return f"cancel:{instance_id}"


@bp.activity_trigger(input_name="job")
@bp.durable_client_input(client_name="client")
async def raise_cancel(
    job: dict[str, Any], client: df.DurableOrchestrationClient
) -> dict[str, Any]:
    payload = {"reason": job.get("reason") or "cancelled"}
    report: dict[str, str] = {}
    for instance_id in job["instance_ids"]:
        try:
            await client.raise_event(instance_id, cancel_event(instance_id), payload)
        except Exception:  # noqa: BLE001 - a finished instance takes no events: nothing to stop
            report[instance_id] = "not_running"
        else:
            report[instance_id] = "raised"
    return {"ok": True, "report": report}


@bp.activity_trigger(input_name="job")
@bp.durable_client_input(client_name="client")
async def terminate_stragglers(
    job: dict[str, Any], client: df.DurableOrchestrationClient
) -> dict[str, Any]:
    reason = job.get("reason") or "did not stop within the cancellation grace period"
    report: dict[str, str] = {}
    for instance_id in job["instance_ids"]:
        try:
            await client.terminate(instance_id, reason)
        except Exception:  # noqa: BLE001 - it ended by itself in the meantime
            report[instance_id] = "not_running"
        else:
            report[instance_id] = "terminated"
    return {"ok": True, "report": report}
