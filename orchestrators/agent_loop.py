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

**Controls held by an entity.** Even so, an event can still be lost at the boundary between two
executions: one raised in the same batch as the timer that won the race goes to the stale
waiter, and on Azure a second control in the batch of the first is buffered with no waiter and
dropped by continue-as-new (Python cannot ask the extension to preserve unprocessed events).
So a loop declared with an ``incarnation`` (every loop the API starts now) does not take its
controls from events at all: the API signals them to the loop's ``loop_control`` entity
(``entities/loop_control.py``), where they are durable once accepted, and raises the control
event only as a wake-up (``{"action": "wake"}``). Every execution first takes the pending
controls from the entity (an entity call: exactly once, recorded in its history) and applies
them in order; a wake-up ends the execution at once, so the next one takes what woke it. A
lost wake-up therefore costs nothing that the next execution does not pick up: nothing is held
by the execution that ends, so nothing can be dropped with it. The loop shows what it applied
(``controls``: a count and an order-free digest of the request ids, ``kernel/loops/loop.py``).
Loops without an incarnation (started by the earlier code) keep taking controls from events.

**A burst of wake-ups costs a few executions, not one each.** Every request raises one wake-up,
and a burst of them reaches the loop together: the first ends the execution, and the rest are
buffered - carried into the next execution by the durable host, dropped by the extension. So the
execution a wake-up ended continues as new with ``drain``, and the next execution starts by
taking every buffered wake-up: its wake-up event raced with a timer due now, again and again
until the timer wins, then it continues as new and the execution after it takes the requests
from the entity. A steady stream of wake-ups could keep a timer from winning (a store may
deliver the timer later than the events raised meanwhile), so a drain also stops after
``DRAIN_LIMIT`` wake-ups or ``DRAIN_WINDOW`` of the orchestration's time: the requests are
taken then, and a wake-up left behind starts the next drain. Two rules of the Python SDK
shape this:

* the drain is the execution's first wait, before any other step, so each buffered wake-up
  meets a wait that is already open. An event that arrives while no wait is open is kept by
  the SDK under its name and satisfies every later wait of that name (SDK issue #507), while
  the extension gives each wait its own event: a drain after another step would spin on the
  one it kept and diverge from the extension;
* the drain's last wait lost to its timer but stays registered until the execution ends, and a
  wake-up it takes would be a wake-up nobody answers. So the draining execution takes nothing:
  it continues as new at once, and the next execution's ``take`` comes after every wake-up
  the drain saw, whoever took them.

A wake-up dropped instead of carried (the extension) leaves the drain nothing to take: its timer
wins at once. An action sent as the event by an app of the earlier code is applied when drained,
as when it wakes the loop. The loop shows its ``generation`` (executions since it was declared).
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
# Wake-ups one execution drains at most, and for how long while more keep coming: then the
# next execution takes the requests, and a wake-up left over starts another drain (module doc).
DRAIN_LIMIT = 1000
DRAIN_WINDOW = timedelta(seconds=2)
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
    if job.get("incarnation"):
        return (yield from controlled(context, job, spec))
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


def drain_wake_ups(context: df.DurableOrchestrationContext) -> Generator[Any, Any, list[str]]:
    """Take the buffered wake-ups until the timer wins, ``DRAIN_LIMIT`` were taken or
    ``DRAIN_WINDOW`` has passed; the actions among them sent by the earlier code, in order.
    The first wait of an execution only (module doc)."""
    actions: list[str] = []
    began = _aware(context.current_utc_datetime)
    for _ in range(DRAIN_LIMIT):
        now = _aware(context.current_utc_datetime)  # the episode's time: replay-safe
        if now - began >= DRAIN_WINDOW:
            break  # a steady stream: take what it sent so far, drain the rest later
        raised, payload = yield from event_or_deadline(context, loops.CONTROL_EVENT, now)
        if not raised:
            break
        action = event_payload(payload).get("action")
        if action in loops.ACTIONS:
            actions.append(str(action))
    return actions


def controlled(
    context: df.DurableOrchestrationContext, job: dict[str, Any], spec: loops.LoopSpec
) -> Generator[Any, Any, Any]:
    """One execution of a loop whose controls wait in its ``loop_control`` entity."""
    previous = _parse(job.get("previous"))
    state = {"paused": bool(job.get("paused")), "deleted": False}
    runs, last, controls = (
        int(job.get("runs") or 0),
        job.get("last_submission"),
        job.get("controls"),
    )
    generation = int(job.get("generation") or 0) + 1
    session_id = str(job["session_id"])
    entity = df.EntityId(
        loops.CONTROL_ENTITY,
        loops.control_entity_key(session_id, spec.loop_id, str(job["incarnation"])),
    )

    def publish(phase: str, due: datetime | None = None) -> None:
        set_status(
            context,
            phase,
            loop=spec.as_json(),
            next=loops.format_occurrence(due) if due else None,
            runs=runs,
            last_submission=last,
            controls=controls,
            generation=generation,
        )

    def deleted() -> dict[str, Any]:
        context.signal_entity(entity, "forget")
        set_status(
            context,
            "deleted",
            loop=spec.as_json(),
            runs=runs,
            last_submission=last,
            controls=controls,
            generation=generation,
        )
        return {"deleted": True, "runs": runs}

    def carry_on(**changes: Any) -> None:
        context.continue_as_new(
            {
                **job,
                "paused": state["paused"],
                "previous": loops.format_occurrence(previous) if previous else None,
                "runs": runs,
                "last_submission": last,
                "controls": controls,
                "generation": generation,
                "submit_now": None,
                "drain": False,
                **changes,
            }
        )

    def planned() -> datetime | None:
        now = _aware(context.current_utc_datetime)
        return None if state["paused"] else loops.next_occurrence(spec, now, previous)

    if job.get("drain"):  # woken: take the buffered wake-ups, nothing else (module doc)
        publish("paused" if state["paused"] else "sleeping", planned())
        for action in (yield from drain_wake_ups(context)):  # sent by the earlier code
            state = loops.control(state, action)
            if state["deleted"]:
                return deleted()
        carry_on()
        return None
    fired = _parse(job.get("submit_now"))  # the previous execution's timer fired for it
    if fired is not None:
        publish("sleeping", fired)
        last = yield from submit(context, job, spec, _aware(fired))
        previous, runs = _aware(fired), runs + 1
    taken = yield context.call_entity(entity, "take")
    for request in taken or []:
        try:
            state = loops.control(state, request.get("action"))
        except ValidationError:
            continue  # the entity holds only valid actions; anything else is not counted
        controls = loops.note_applied(controls, str(request.get("id")))
        if state["deleted"]:
            break  # what was sent after a delete has no loop to act on
    if state["deleted"]:
        return deleted()
    due = planned()
    now = _aware(context.current_utc_datetime)
    publish("paused" if state["paused"] else "sleeping", due)
    raised, payload = yield from event_or_deadline(
        context, loops.CONTROL_EVENT, due or now + PAUSED_WAIT
    )
    # Woken: the next execution drains the wake-ups buffered behind this one, and the one
    # after it takes the controls. Paused for a week: the next execution takes them. The timer
    # fired: the next execution submits the occurrence first.
    sent = event_payload(payload).get("action") if raised else None
    if sent in loops.ACTIONS:  # sent as an event by an app of the earlier code
        state = loops.control(state, sent)
        if state["deleted"]:
            return deleted()
    submit_next = due if not raised else None
    carry_on(
        submit_now=loops.format_occurrence(submit_next) if submit_next else None,
        drain=raised,
    )
    return None
