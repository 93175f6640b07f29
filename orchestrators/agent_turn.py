"""``agent_turn``: one orchestration per submission, from acceptance to the final answer.

Phases (mirrored in a small custom status ``{"phase", "round"}`` and in the session's task
graph): accept -> queued (waits for its turn) -> request (a model call) -> answer.

1. ``accept`` in the session entity is the authoritative first-wins check: a duplicate
   submission returns the original outcome (a retry after completion converges on it).
2. One active turn per session: a queued submission waits for its own event
   ``turn:{submission}``, raced with a polling timer as a safety net. When the timer wins
   and the entity still says "queued", the orchestration continues as new with the same
   input instead of waiting on the same event name again (a second wait on one name would
   be matched to the abandoned first one); ``accept`` is first-wins, so re-running it is a
   no-op, and an event raised in between is carried over to the new execution.
3. The turn itself: model calls are activities that get the session id, never the transcript.
4. ``finish`` (a commit with a final status) hands the turn over: the next submission's
   orchestration gets its event through the ``hand_over`` activity.
"""

from __future__ import annotations

from collections.abc import Generator
from datetime import timedelta
from typing import Any

import azure.durable_functions as df

from kernel import ids

bp = df.Blueprint()
QUEUE_POLL = timedelta(seconds=30)


def session_entity(session_id: str) -> df.EntityId:
    return df.EntityId("session", ids.session_entity_key(session_id))


def status(context: df.DurableOrchestrationContext, phase: str, **extra: Any) -> None:
    context.set_custom_status({"phase": phase, **extra})


@bp.orchestration_trigger(context_name="context")
def agent_turn(context: df.DurableOrchestrationContext) -> Generator[Any, Any, dict[str, Any]]:
    job: dict[str, Any] = context.get_input()
    session_id, submission_id = job["session_id"], job["submission_id"]
    entity = session_entity(session_id)
    status(context, "accept")
    request = {"request_id": job["request_id"], "submission_id": submission_id}
    request.update({k: job[k] for k in ("text", "text_ref") if job.get(k) is not None})
    accepted = yield context.call_entity(entity, "accept", request)
    if not accepted["ok"]:
        return {"ok": False, "error": accepted["error"]}
    result = accepted["result"]
    if result.get("duplicate") and result["status"] in ("completed", "failed", "cancelled"):
        view = yield context.call_entity(entity, "submission_view", {"submission_id": submission_id})
        return {"ok": True, "duplicate": True, "submission": view.get("result")}
    if result["status"] == "queued":
        status(context, "queued")
        handed = context.wait_for_external_event(f"turn:{submission_id}")
        poll = context.create_timer(context.current_utc_datetime + QUEUE_POLL)
        winner = yield context.task_any([handed, poll])
        if winner == handed:
            poll.cancel()
        else:
            view = yield context.call_entity(entity, "submission_view", {"submission_id": submission_id})
            if view["ok"] and view["result"]["status"] == "queued":
                context.continue_as_new(job)
                return {"ok": True, "status": "queued"}
    outcome = yield context.call_sub_orchestrator(
        "agent_run", {**job, "turn_instance_id": context.instance_id},
        ids.child_task_id(context.instance_id, "run"),
    )
    status(context, "finishing")
    finished = yield context.call_entity(
        entity, "finish",
        {"submission_id": submission_id, "status": outcome.get("status", "failed"),
         "answer": (outcome.get("answer") or "")[:4000] or None},
    )
    next_id = (finished.get("result") or {}).get("next_submission_id")
    if next_id:
        yield context.call_activity(
            "hand_over",
            {"instance_id": ids.turn_instance_id(session_id, next_id), "event": f"turn:{next_id}"},
        )
    status(context, "done", status=outcome.get("status"))
    return {"ok": True, "status": outcome.get("status"), "answer": outcome.get("answer")}

