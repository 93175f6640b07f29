"""``agent_loop``: a cron-driven agent loop, one eternal orchestration per loop.

Instance id ``loop:{session}:{loop}`` (``kernel/loops/loop.py``). Each execution sleeps on a durable
timer until the next occurrence - raced with the control event, so pause, resume and delete
take effect at once - submits the loop's prompt as an ordinary submission of the session with
the request id ``loop:{loop}:{occurrence}`` (``loop_submit``), and continues as new, so the
history stays one occurrence long however long the loop lives.

Why an orchestration and not a timer trigger: loops are declared per session at run time,
while a timer trigger is fixed in the app's code; an orchestration with durable timers
deploys unchanged to Azure Functions (any Durable backend) and to the durable host, costs no
process while it sleeps, and its state (paused, last occurrence, runs) is its input.

A loop woken late (the host was down) submits the occurrence it slept for once and plans the
next one from now: missed slots are not replayed one by one.

The control event must never be lost. Once the timer has won the race, the event's waiter stays
registered for the rest of the execution, and any event raised meanwhile goes to it: nobody
awaits it, and it is not carried over to the next execution either (Durable semantics). So an
execution whose timer fired continues as new at once, with the occurrence in its input
(``submit_now``), and the next execution submits it *before* it waits for the event: an event
raised during the submission finds no waiter, is kept, and is taken by the wait that follows.
Executions started by the earlier code (their input has no ``submit_first``) still submit after
the race, as they did, so they replay unchanged; every execution now continues with the flag.

The submission runs under the failure policy ``SUBMIT`` (``orchestrators/failures.run_kind``):
a failed ``loop_submit`` is tried again after durable timers, and when every try failed the
``notify_operator`` handler runs once as ``{loop instance}:{occurrence}:on-failure`` with the
submission's input and the last failure; the loop records the tier (``ok``, ``retried``,
``handled``, ``needs_attention``) with its last submission and goes on to the next occurrence.
A first try that succeeds asks for exactly the activity a loop asked for before, so running
loops replay unchanged. A paused loop waits for the
control event, bounded by a week, after which it continues as new, still paused.
"""

from __future__ import annotations

from collections.abc import Generator
from datetime import UTC, datetime, timedelta
from typing import Any

import azure.durable_functions as df

from kernel.common.errors import ValidationError
from kernel.loops import loop as loops
from kernel.turn.failures import FailurePolicy
from orchestrators.failures import run_kind
from orchestrators.steps import event_or_deadline, event_payload, set_status

bp = df.Blueprint()
PAUSED_WAIT = timedelta(days=7)
# A submission that could not be made (the session's store unreachable, an activity lost) is
# tried three times over 15 s, then the operator is told once and the loop goes on with the
# next occurrence: a refused submission (queue full) is an answer, not a failure.
SUBMIT = FailurePolicy(
    kind="loop_submit", max_attempts=3, first_retry_s=5, backoff=2, on_failure="notify_operator"
)


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _parse(text: Any) -> datetime | None:
    return datetime.fromisoformat(text) if isinstance(text, str) else None


def submit(
    context: df.DurableOrchestrationContext,
    job: dict[str, Any],
    spec: loops.LoopSpec,
    due: datetime,
) -> Generator[Any, Any, dict[str, Any]]:
    """Submit one occurrence under ``SUBMIT``; what the loop shows as its last submission,
    with the tier it reached."""
    request_id = loops.occurrence_request_id(spec.loop_id, due)
    outcome = yield from run_kind(
        context,
        SUBMIT,
        f"{context.instance_id}:{loops.format_occurrence(due)}",
        {
            "session_id": job["session_id"],
            "request_id": request_id,
            "prompt": spec.prompt,
            **loops.run_options(spec),
        },
        publish=False,  # the loop's own status says sleeping / paused
    )
    if outcome["ok"]:
        return {**outcome["result"], "tier": outcome["tier"]}
    return {
        "ok": False,
        "request_id": request_id,
        "error": {"error": "submit_failed", "message": outcome["failure"][:500]},
        "tier": outcome["tier"],
        "attempts": outcome["attempts"],
    }


@bp.orchestration_trigger(context_name="context")
def agent_loop(context: df.DurableOrchestrationContext) -> Generator[Any, Any, Any]:
    job: dict[str, Any] = context.get_input()
    spec = loops.spec_from_json(job["spec"])
    now = _aware(context.current_utc_datetime)
    previous = _parse(job.get("previous"))
    state = {"paused": bool(job.get("paused")), "deleted": False}
    runs = int(job.get("runs") or 0)
    last = job.get("last_submission")
    fired = _parse(job.get("submit_now"))  # the previous execution's timer fired for it
    if fired is not None:
        set_status(
            context,
            "sleeping",
            loop=spec.as_json(),
            next=loops.format_occurrence(fired),
            runs=runs,
            last_submission=last,
        )
        last = yield from submit(context, job, spec, _aware(fired))
        previous, runs = _aware(fired), runs + 1
        now = _aware(context.current_utc_datetime)
    due = None if state["paused"] else loops.next_occurrence(spec, now, previous)
    set_status(
        context,
        "paused" if state["paused"] else "sleeping",
        loop=spec.as_json(),
        next=loops.format_occurrence(due) if due else None,
        runs=runs,
        last_submission=last,
    )
    raised, payload = yield from event_or_deadline(
        context, loops.CONTROL_EVENT, due or now + PAUSED_WAIT
    )
    submit_next: datetime | None = None
    if raised:
        try:
            state = loops.control(state, event_payload(payload).get("action"))
        except ValidationError:
            pass  # the API validates actions; anything else is ignored, not fatal
    elif due is not None and job.get("submit_first"):
        submit_next = due  # by the next execution, before it waits (module doc)
    elif due is not None:
        last = yield from submit(context, job, spec, due)
        previous, runs = due, runs + 1
    if state["deleted"]:
        set_status(context, "deleted", loop=spec.as_json(), runs=runs, last_submission=last)
        return {"deleted": True, "runs": runs}
    context.continue_as_new(
        {
            **job,
            "paused": state["paused"],
            "previous": loops.format_occurrence(previous) if previous else None,
            "runs": runs,
            "last_submission": last,
            "submit_first": True,
            "submit_now": loops.format_occurrence(submit_next) if submit_next else None,
        }
    )
    return None
