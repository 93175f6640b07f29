"""A background model call from an orchestration: submit, then poll on durable timers.

Used by ``agent_round`` when the turn's limits say ``model_background`` (the app setting
``AGENT_MODEL_BACKGROUND=1``; ``docs/turn.md``). Two sub-generators, called with
``yield from`` (they only ask the context for durable actions, so they replay like inline code):

* ``submit(context, job)``: the ``submit_model_request`` activity; its result - the request's
  handle - is committed to this orchestration's history, so a replay after a crash finds the
  same handle and never starts a second request. Returns the activity's envelope (an activity
  crash is a ``transient`` failure, like a synchronous call).
* ``wait(context, job, submitted, schedule, cancel, **status)``: sleeps on a durable timer, polls
  (``poll_model_request``), and again, with the delays of ``poll_delay`` (``first_s``, doubled
  each poll, at most ``max_s``), until the request is final or ``timeout_s`` after the wait
  began. Returns the reply envelope ``agent_round`` already handles: ``{"ok": true,
  "response", "content_ref"}``, or ``{"ok": false, "kind", "message", "retry_after"}`` (the
  provider's failure: ``failed`` requests and unknown handles end the call; ``timeout`` when the
  deadline passed, after the remote request was cancelled), or ``{"ok": false, "kind":
  "fatal", "cancelled": true, "message"}`` when the turn was cancelled while it waited.

Cancel: the wait stops at once on the orchestration's own event ``cancel:{instance id}`` (the
``raise_cancel`` convention; the caller creates its one wait on it and passes it as
``cancel``), and at the next poll when a cancel was recorded on the submission (the poll
activity reads it). Either way the ``cancel_model_request`` activity asks the provider to stop
the request (up to ``CANCEL_TRIES`` times while the provider cannot be reached) before the
call ends as cancelled: the provider stops spending on a turn nobody waits for. A poll that
cannot reach the provider (``unknown``) is no failure of the call: the next poll asks again
(no sooner than the provider's Retry-After), until the deadline.

``poll_delay`` and ``next_wait`` are the pure schedule; the generators turn it into timers.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import azure.durable_functions as df

from kernel.turn.policy import TurnLimits
from orchestrators.notices import event_reason, sleep_or_cancel
from orchestrators.steps import set_status

Gen = Generator[Any, Any, Any]
# Bounds the loop whatever the settings; with the default schedule the deadline ends it first.
MAX_POLLS = 5000
CANCEL_TRIES = 3
FINAL_FAILURES = ("failed", "cancelled")


@dataclass(frozen=True, slots=True)
class PollSchedule:
    first_s: float
    max_s: float
    timeout_s: float

    @classmethod
    def of(cls, limits: TurnLimits) -> PollSchedule:
        return cls(limits.model_poll_s, limits.model_max_poll_s, limits.model_background_timeout_s)


def poll_delay(poll_no: int, first_s: float, max_s: float) -> float:
    """Seconds before poll ``poll_no`` (1-based): ``first_s * 2**(poll_no-1)``, at most ``max_s``.

    No jitter: the delay becomes a durable timer in a replayed orchestration."""
    if poll_no < 1:
        raise ValueError(f"poll numbers start at 1, not {poll_no}")
    # The exponent is capped only to keep the float finite; max_s caps the delay.
    return min(max_s, first_s * 2.0 ** min(poll_no - 1, 64))


def next_wait(
    poll_no: int, elapsed_s: float, schedule: PollSchedule, at_least: float = 0.0
) -> float | None:
    """Seconds to sleep before poll ``poll_no``, never past the deadline; None once it passed.

    ``at_least``: the provider's Retry-After from the last poll (a 429), honoured as given."""
    remaining = schedule.timeout_s - elapsed_s
    if remaining <= 0:
        return None
    return min(max(poll_delay(poll_no, schedule.first_s, schedule.max_s), at_least), remaining)


def submit(context: df.DurableOrchestrationContext, job: dict[str, Any]) -> Gen:
    """The ``submit_model_request`` envelope (see the module docstring)."""
    try:
        return (yield context.call_activity("submit_model_request", job))
    except Exception as exc:  # noqa: BLE001 - an activity crash is a transient failure
        return {"ok": False, "kind": "transient", "message": str(exc)[:500], "retry_after": None}


def wait(
    context: df.DurableOrchestrationContext,
    job: dict[str, Any],
    submitted: dict[str, Any],
    schedule: PollSchedule,
    cancel: Any,
    **status: Any,
) -> Gen:
    """Poll the submitted request until it is final, cancelled or past the deadline.

    ``cancel`` is the caller's one wait on its ``cancel:{instance id}`` event."""
    handle = submitted["handle"]
    ref = {
        "handle": handle,
        "session_id": job["session_id"],
        "submission_id": job["submission_id"],
        "timeout_s": job["timeout_s"],
    }
    began = context.current_utc_datetime
    last = str(submitted.get("status") or "queued")
    retry_after = 0.0
    delay: float | None = 0.0
    for poll_no in range(1, MAX_POLLS + 1):
        elapsed = (context.current_utc_datetime - began).total_seconds()
        delay = next_wait(poll_no, elapsed, schedule, retry_after)
        if delay is None:
            break
        set_status(context, "polling", **status, handle=handle["id"], poll=poll_no, status=last)
        if (yield from sleep_or_cancel(context, cancel, delay)):
            reason = event_reason(cancel.result)
            return (yield from cancelled(context, ref, reason, schedule.first_s, status))
        polled = yield from poll(context, ref)
        last = str(polled.get("status"))
        retry_after = float(polled.get("retry_after") or 0.0) if last == "unknown" else 0.0
        if last == "cancel_requested":
            reason = str(polled.get("reason"))
            return (yield from cancelled(context, ref, reason, schedule.first_s, status))
        if last == "completed" and polled.get("ok"):
            return {k: polled.get(k) for k in ("ok", "response", "content_ref")}
        if last in FINAL_FAILURES:
            return failure(polled)
    yield from cancel_remote(context, ref, schedule.first_s, status)
    limit = f"{schedule.timeout_s:g} s" if delay is None else f"{MAX_POLLS} polls"
    return {
        "ok": False,
        "kind": "timeout",
        "message": f"the background model request {handle['id']} did not finish within {limit}",
        "retry_after": None,
    }


def poll(context: df.DurableOrchestrationContext, ref: dict[str, Any]) -> Gen:
    """One ``poll_model_request``; an activity crash is a poll that could not tell."""
    try:
        return (yield context.call_activity("poll_model_request", ref))
    except Exception as exc:  # noqa: BLE001 - the next poll asks again
        return {"status": "unknown", "message": str(exc)[:500]}


def cancelled(
    context: df.DurableOrchestrationContext,
    ref: dict[str, Any],
    reason: str,
    pause_s: float,
    status: dict[str, Any],
) -> Gen:
    """Cancel the remote request, then end the call as cancelled."""
    yield from cancel_remote(context, ref, pause_s, status)
    return {"ok": False, "kind": "fatal", "cancelled": True, "message": f"cancelled: {reason}"}


def cancel_remote(
    context: df.DurableOrchestrationContext,
    ref: dict[str, Any],
    pause_s: float,
    status: dict[str, Any],
) -> Gen:
    """Ask the provider to stop the request, ``pause_s`` apart while it cannot be reached; the
    status it reports (``unknown`` if it never could)."""
    answer: dict[str, Any] = {"status": "unknown"}
    for attempt in range(1, CANCEL_TRIES + 1):
        if attempt > 1:
            yield context.create_timer(context.current_utc_datetime + timedelta(seconds=pause_s))
        set_status(context, "cancelling", **status, handle=ref["handle"]["id"], cancel_try=attempt)
        try:
            answer = yield context.call_activity(
                "cancel_model_request", {"handle": ref["handle"], "timeout_s": ref["timeout_s"]}
            )
        except Exception as exc:  # noqa: BLE001 - try again, a bounded number of times
            answer = {"status": "unknown", "message": str(exc)[:500]}
        if answer.get("status") != "unknown":
            break
    return answer


def failure(polled: dict[str, Any]) -> dict[str, Any]:
    """The failure envelope of a request that ended without a response."""
    return {
        "ok": False,
        "kind": polled.get("kind") or "fatal",
        "message": str(polled.get("message") or f"the model request is {polled.get('status')}"),
        "retry_after": polled.get("retry_after"),
    }
