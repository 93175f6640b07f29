"""``agent_turn``: one orchestration per submission, from acceptance to the final answer.

Input (the job, written by the HTTP API): ``{session_id, request_id, submission_id, text |
text_ref}``; the instance id is ``{session}:turn:{submission}`` (``kernel.common.ids``). Output:
``{"ok": true, "status", "answer", "duplicate"}`` or ``{"ok": false, "error"}`` when the
session refused the submission (e.g. ``queue_full``).

Phases (mirrored in a small custom status ``{"phase", ...}`` and in the session's task graph):
accept -> queued (waits for its turn) -> run (the ``agent_run`` sub-orchestration) ->
finishing -> done.

1. ``accept`` in the session entity is the authoritative first-wins check. A duplicate of a
   final submission returns the stored outcome and runs nothing: this is what makes a start
   that raced with a retry (or restarted a completed instance id) converge on the original.
2. One active turn per session: a queued submission waits for its own event
   ``turn:{submission}``, raced with a polling timer as a safety net. When the timer wins, the
   orchestration asks the session: still queued -> continue as new with the same input (a
   second wait on one event name would be matched to the abandoned first one; ``accept`` is
   first-wins, so repeating it is a no-op, and an event raised in between is carried over);
   final (cancelled while queued) -> stop; active -> run.
3. The run is ``agent_run`` (child id ``{turn}:run``), called with the job plus
   ``turn_instance_id``; it returns ``{"status": completed|failed|cancelled|needs_attention,
   "answer", "reason"}``. A child that fails or returns something else counts as ``failed``,
   so the submission is always finished and the session never stays blocked.
4. One commit records the run's reason on the turn task and makes the submission final (if it
   is refused, ``finish`` - idempotent, first wins - ends it anyway); the result names the next
   submission, whose orchestration gets ``turn:{next}`` through the ``hand_over`` activity.

A turn never blocks its session's queue:
* Anything that raises after ``accept`` (an entity call the host quarantined, a bug) ends the
  submission as ``failed`` with the error as its reason and hands the turn over, like step 4.
* A turn that ends without running its own code (terminated by an operator, quarantined by the
  host) cannot do that, so the others do it for it (``settle_turn``): a queued submission whose
  poll finds it still queued, and a turn whose hand-over could not be delivered, ask
  ``active_turn`` about the active submission; if its turn has ended, they finish it as
  ``failed`` (a commit, so only while it is still open: the session decides the race), terminate
  what still runs under it, and hand the turn to the next submission, and so on.
Both add actions only where the old code ended or failed, so instances running the old code
replay unchanged.

5. History retention: last of all, once the turn is handed over, the ``purge_settled``
   activity purges the orchestration histories of the session's earlier settled submissions
   whose retention (``AGENT_HISTORY_RETENTION``) has passed. Only a turn whose input says
   ``purge_settled`` (the API sets it, recorded once in the input like ``tool_task``'s
   ``declarations``) takes this step, so a turn started before replays exactly its recorded
   history (the golden histories pin that); ``agent_run`` gets the job without the flag. A
   purge that fails or is refused (a bad setting) never fails the turn: the problem shows in
   the custom status (``retention``) and the next submission's pass tries again.
"""

from __future__ import annotations

from collections.abc import Generator
from datetime import timedelta
from typing import Any

import azure.durable_functions as df

from kernel.common import ids
from kernel.common.content import REFERENCE_THRESHOLD_BYTES
from kernel.common.statuses import (
    ENDED_RUNTIME_STATUSES,
    FINAL_SUBMISSION_STATUSES,
    SubmissionStatus,
    TaskStatus,
)
from kernel.common.text import scrub
from kernel.session.requests import MAX_REASON_CHARS
from orchestrators.steps import (
    child_version,
    event_or_deadline,
    kind_version,
    session_entity,
    set_phase,
)

bp = df.Blueprint()
QUEUE_POLL = timedelta(seconds=30)
ELLIPSIS = "…"
MAX_SETTLE_STEPS = 10  # dead turns passed over in one go; the next poll goes on from there


def accept_request(job: dict[str, Any]) -> dict[str, Any]:
    request = {"request_id": job["request_id"], "submission_id": job["submission_id"]}
    request.update({k: job[k] for k in ("text", "text_ref") if job.get(k) is not None})
    if "owner" in job:  # only when the API trusts principals (docs/security.md)
        request["owner"] = job["owner"]
    return request


def finish_status(outcome: Any) -> tuple[str, str | None, str | None]:
    """(final status, answer, reason) for whatever ``agent_run`` returned.

    ``needs_attention`` ends the submission as ``failed``: the turn gives the queue back, and
    the reason says a person is needed.
    """
    if not isinstance(outcome, dict):
        return SubmissionStatus.FAILED, None, "the run returned no outcome"
    answer = outcome.get("answer") if isinstance(outcome.get("answer"), str) else None
    reason = outcome.get("reason") if isinstance(outcome.get("reason"), str) else None
    run_status = outcome.get("status")
    if run_status in FINAL_SUBMISSION_STATUSES:
        return run_status, answer, reason
    if run_status == "needs_attention":
        return SubmissionStatus.FAILED, answer, reason or "needs attention"
    return SubmissionStatus.FAILED, answer, reason or f"the run ended with status {run_status!r}"


def clip_inline(text: str | None, limit: int = REFERENCE_THRESHOLD_BYTES) -> str | None:
    """``text`` cut to at most ``limit`` UTF-8 bytes (ending in an ellipsis when cut).

    The submission's ``answer`` is kept inline; the full text is in the run's assistant entry.
    A lone surrogate (a model can produce one) becomes U+FFFD here, so the copy can be encoded.
    """
    text = scrub(text) if text else text
    if text is None or len(text.encode("utf-8")) <= limit:
        return text or None
    room = limit - len(ELLIPSIS.encode("utf-8"))
    return text.encode("utf-8")[:room].decode("utf-8", errors="ignore") + ELLIPSIS


def finish_commit(
    job: dict[str, Any], turn_id: str, final: str, answer: str | None, reason: str | None
) -> dict[str, Any]:
    """One commit that records why the turn ended and makes the submission final."""
    request: dict[str, Any] = {
        "submission_id": job["submission_id"],
        "submission": {"status": final, "answer": clip_inline(answer)},
    }
    if reason:
        request["tasks"] = [{"id": turn_id, "reason": scrub(reason)[:MAX_REASON_CHARS]}]
    return request


def run_job(job: dict[str, Any]) -> dict[str, Any]:
    """The job ``agent_run`` gets: the turn's own without the turn's flags."""
    return {key: value for key, value in job.items() if key != "purge_settled"}


def task_update(
    turn_id: str, task_status: str, phase: str, version: str | None = None
) -> dict[str, Any]:
    task = {"id": turn_id, "kind": "turn", "status": task_status, "phase": phase}
    return {"tasks": [{**task, "version": version} if version is not None else task]}


@bp.orchestration_trigger(context_name="context")
def agent_turn(context: df.DurableOrchestrationContext) -> Generator[Any, Any, dict[str, Any]]:
    job: dict[str, Any] = context.get_input()
    entity = session_entity(job["session_id"])
    set_phase(context, "accept")
    accepted = yield context.call_entity(entity, "accept", accept_request(job))
    if not accepted["ok"]:
        set_phase(context, "rejected", error=accepted["error"]["error"])
        return {"ok": False, "error": accepted["error"]}
    try:
        return (yield from accepted_turn(context, entity, job, accepted["result"]))
    except Exception as exc:  # noqa: BLE001 - whatever failed, the submission must end
        return (yield from fail_turn(context, entity, job, exc))


def accepted_turn(
    context: df.DurableOrchestrationContext,
    entity: df.EntityId,
    job: dict[str, Any],
    result: dict[str, Any],
) -> Generator[Any, Any, dict[str, Any]]:
    submission_id = job["submission_id"]
    if result["status"] in FINAL_SUBMISSION_STATUSES:
        return (yield from stored_outcome(context, entity, submission_id))
    if result["status"] == SubmissionStatus.QUEUED:
        if not result["duplicate"]:
            yield context.call_entity(
                entity,
                "commit",
                task_update(
                    context.instance_id, TaskStatus.WAITING, "queued", kind_version(context, "turn")
                ),
            )
        turn = yield from wait_for_turn(context, entity, submission_id)
        if turn == SubmissionStatus.QUEUED and (
            yield from settle_turn(context, entity, job["session_id"], submission_id)
        ):
            turn = SubmissionStatus.ACTIVE
        if turn == SubmissionStatus.QUEUED:
            context.continue_as_new(job)
            return {"ok": True, "status": SubmissionStatus.QUEUED}
        if turn in FINAL_SUBMISSION_STATUSES:
            return (yield from stored_outcome(context, entity, submission_id))
    return (yield from run_and_finish(context, entity, job))


def wait_for_turn(
    context: df.DurableOrchestrationContext, entity: df.EntityId, submission_id: str
) -> Generator[Any, Any, str]:
    """Wait for the hand-over event or the poll timer; the submission's status afterwards."""
    set_phase(context, "queued")
    deadline = context.current_utc_datetime + QUEUE_POLL
    handed, _ = yield from event_or_deadline(context, f"turn:{submission_id}", deadline)
    if handed:
        return SubmissionStatus.ACTIVE
    view = yield context.call_entity(entity, "submission_view", {"submission_id": submission_id})
    return view["result"]["status"] if view["ok"] else SubmissionStatus.FAILED


def run_and_finish(
    context: df.DurableOrchestrationContext, entity: df.EntityId, job: dict[str, Any]
) -> Generator[Any, Any, dict[str, Any]]:
    turn_id = context.instance_id
    set_phase(context, "run")
    version = kind_version(context, "turn")
    yield context.call_entity(
        entity, "commit", task_update(turn_id, TaskStatus.RUNNING, "run", version)
    )
    try:
        outcome = yield context.call_sub_orchestrator(
            "agent_run",
            {**run_job(job), "turn_instance_id": turn_id},
            ids.child_task_id(turn_id, "run"),
            version=child_version(context),
        )
    except Exception as exc:  # noqa: BLE001 - a failed child still finishes the submission
        reason: str | None = scrub(str(exc))[:500]
        outcome = {"status": SubmissionStatus.FAILED, "answer": None, "reason": reason}
    final, answer, reason = finish_status(outcome)
    return (yield from finish_and_hand_over(context, entity, job, final, answer, reason))


def fail_turn(
    context: df.DurableOrchestrationContext,
    entity: df.EntityId,
    job: dict[str, Any],
    exc: Exception,
) -> Generator[Any, Any, dict[str, Any]]:
    """End the submission as ``failed`` after ``exc`` and hand the turn over.

    ``finish`` is first-wins, so a submission that was already final keeps its outcome. If this
    fails too, the orchestration fails and ``settle_turn`` of the others finishes it."""
    reason = scrub(f"the turn failed: {type(exc).__name__}: {exc}")
    failed = SubmissionStatus.FAILED
    return (yield from finish_and_hand_over(context, entity, job, failed, None, reason))


def finish_and_hand_over(
    context: df.DurableOrchestrationContext,
    entity: df.EntityId,
    job: dict[str, Any],
    final: str,
    answer: str | None,
    reason: str | None,
) -> Generator[Any, Any, dict[str, Any]]:
    turn_id = context.instance_id
    set_phase(context, "finishing")
    finished = yield context.call_entity(
        entity, "commit", finish_commit(job, turn_id, final, answer, reason)
    )
    if not finished["ok"]:
        # Refused (a finish raced in, or the answer is not storable): finish is idempotent and
        # first-wins, so this ends the submission whatever happened.
        finished = yield context.call_entity(
            entity,
            "finish",
            {
                "submission_id": job["submission_id"],
                "status": final,
            },
        )
    stored = (finished.get("result") or {}) if finished["ok"] else {}
    next_id = stored.get("next_submission_id")
    if next_id:
        handed = yield context.call_activity(
            "hand_over",
            {
                "instance_id": ids.turn_instance_id(job["session_id"], next_id),
                "event": f"turn:{next_id}",
            },
        )
        if handed != "raised":
            # Its turn may have ended while it waited (terminated, quarantined).
            yield from settle_turn(context, entity, job["session_id"], None)
    final = stored.get("status", final)
    set_phase(context, "done", status=final)
    if job.get("purge_settled"):
        problem = yield from purge_settled(context, job["session_id"])
        if problem:
            set_phase(context, "done", status=final, retention=problem)
    return {"ok": True, "status": final, "answer": answer, "reason": reason, "duplicate": False}


def purge_settled(
    context: df.DurableOrchestrationContext, session_id: str
) -> Generator[Any, Any, str | None]:
    """Purge the histories of the session's settled submissions whose retention has passed
    (``activities.retention``); the problem to show, if any. Never raises: the turn is over,
    and the next submission's pass tries again."""
    try:
        done = yield context.call_activity(
            "purge_settled", {"session_id": session_id, "turn_instance_id": context.instance_id}
        )
    except Exception as exc:  # noqa: BLE001 - retention must never fail a finished turn
        return scrub(str(exc))[:300]
    if isinstance(done, dict) and not done.get("ok", True):
        return scrub(str(done.get("message")))[:300]
    return None


def settle_turn(
    context: df.DurableOrchestrationContext,
    entity: df.EntityId,
    session_id: str,
    me: str | None,
) -> Generator[Any, Any, bool]:
    """True when submission ``me`` holds the turn once every dead active turn is passed over.

    While the active submission's turn has ended without finishing it: finish it as
    ``failed``, terminate what still runs under it, hand the turn to the next submission, and
    look again (that one's turn may have ended too)."""
    for _ in range(MAX_SETTLE_STEPS):
        seen = yield context.call_activity("active_turn", {"session_id": session_id})
        active = seen.get("submission_id")
        if me is not None and active == me:
            return True
        if active is None or seen.get("runtime_status") not in ENDED_RUNTIME_STATUSES:
            return False
        reason = scrub(
            f"the turn ended ({seen['runtime_status']}) without finishing its submission: "
            f"{seen.get('output')}"
        )
        job = {"submission_id": active}
        dead_turn = seen["turn_instance_id"]
        reaped = yield context.call_entity(
            entity, "commit", finish_commit(job, dead_turn, SubmissionStatus.FAILED, None, reason)
        )
        if not reaped["ok"]:
            return False  # finished in the meantime: whoever did it handed the turn on
        if seen.get("live"):
            yield context.call_activity(
                "terminate_stragglers", {"instance_ids": seen["live"], "reason": reason}
            )
        next_id = reaped["result"].get("next_submission_id")
        if next_id is None or next_id == me:
            return next_id is not None
        handed = yield context.call_activity(
            "hand_over",
            {"instance_id": ids.turn_instance_id(session_id, next_id), "event": f"turn:{next_id}"},
        )
        if handed == "raised":
            return False
    return False


def stored_outcome(
    context: df.DurableOrchestrationContext, entity: df.EntityId, submission_id: str
) -> Generator[Any, Any, dict[str, Any]]:
    """The outcome the session holds for a submission that is already final."""
    view = yield context.call_entity(entity, "submission_view", {"submission_id": submission_id})
    sub = view.get("result") or {}
    set_phase(context, "done", status=sub.get("status"), duplicate=True)
    return {
        "ok": True,
        "status": sub.get("status"),
        "answer": sub.get("answer"),
        "reason": None,
        "duplicate": True,
    }
