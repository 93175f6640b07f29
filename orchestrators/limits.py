"""Run a step under a declared limit (``kernel/common/limits.py``): acquire, run, release.

Orchestrators use it through a declaration (a tool's ``concurrency``), never with code of
their own per limit: ``yield from limited(context, limit, fields, holder, step)`` takes a
slot from the ``limiter`` entity of the filled key, sleeping while it waits - on its own
event ``limit:{holder}:{n}``, raced with a timer, so a lost hand-over only delays it - runs
``step`` (a sub-generator), and releases the slot, handing it to the next in line through the
``hand_over`` activity. A debounced step that a later one superseded does not run: the
result is ``{"ok": false, "kind": "superseded"}``. A caller that passes ``grant`` (a dict)
learns the filled key and its ticket, to show which place in line it had.

A step that raises still releases its slot; a host that dies mid-step leaves the slot to
its lease (``lease_s``), after which the next waiter takes it.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from datetime import UTC, datetime, timedelta
from typing import Any

import azure.durable_functions as df

from kernel.common import limits
from orchestrators.steps import event_or_deadline, set_status

Gen = Generator[Any, Any, Any]
POLL = timedelta(seconds=30)
MAX_WAITS = 10_000


def limiter_entity(key: str) -> df.EntityId:
    return df.EntityId("limiter", key)


def acquire(
    context: df.DurableOrchestrationContext,
    limit: limits.Limit,
    key: str,
    holder: str,
    grant: dict[str, Any] | None = None,
) -> Gen:
    """``granted`` or ``superseded`` (debounce); ``grant``, when given, receives the key and
    the request's ``ticket`` (its place in the key's arrival order)."""
    entity = limiter_entity(key)
    if grant is not None:
        grant["key"] = key
    for wait_no in range(1, MAX_WAITS + 1):
        event = f"limit:{holder}:{wait_no}"
        now = context.current_utc_datetime
        answer = yield context.call_entity(
            entity,
            "acquire",
            {
                **limit.request(),
                "holder": holder,
                "instance_id": context.instance_id,
                "event": event,
                "first": wait_no == 1,
                "now": now.isoformat(),
            },
        )
        if grant is not None and answer.get("ticket") is not None:
            grant["ticket"] = answer["ticket"]
        if answer.get("granted"):
            return "granted"
        if answer.get("superseded"):
            return "superseded"
        deadline = now + POLL
        if answer.get("retry_at"):
            aware = now if now.tzinfo else now.replace(tzinfo=UTC)
            retry = datetime.fromtimestamp(float(answer["retry_at"]), UTC)
            deadline = min(deadline, now + (retry - aware) + timedelta(milliseconds=1))
        set_status(context, "waiting_for_limit", key=key, position=answer.get("position"))
        woken, _ = yield from event_or_deadline(context, event, deadline)
        if woken:
            return "granted"  # the releaser handed its slot to this holder
    return "superseded"


def release(context: df.DurableOrchestrationContext, key: str, holder: str) -> Gen:
    now = context.current_utc_datetime.isoformat()
    released = yield context.call_entity(
        limiter_entity(key), "release", {"holder": holder, "now": now}
    )
    for waiter in released.get("wake", []):
        yield context.call_activity(
            "hand_over", {"instance_id": waiter["instance_id"], "event": waiter["event"]}
        )


def limited(
    context: df.DurableOrchestrationContext,
    limit: limits.Limit,
    fields: dict[str, Any],
    holder: str,
    step: Callable[[], Gen],
    grant: dict[str, Any] | None = None,
) -> Gen:
    key = limits.render_key(limit, fields)
    if (yield from acquire(context, limit, key, holder, grant)) == "superseded":
        return {"ok": False, "kind": "superseded", "message": f"a later call on {key} replaced it"}
    try:
        result = yield from step()
    except Exception:  # a failed step frees its slot too (not GeneratorExit: no yield then)
        if limit.mode == "singleton":
            yield from release(context, key, holder)
        raise
    if limit.mode == "singleton":
        yield from release(context, key, holder)
    return result
