"""``agent_run``: the rounds of one turn (a sub-orchestration of ``agent_turn``).

Each round asks the model (an activity that reads the transcript from the session entity
by reference) and commits its response as an assistant entry. A response without tool
calls is the answer. Returns ``{"status": completed|failed, "answer", "reason"}``.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import azure.durable_functions as df

from orchestrators.agent_turn import session_entity, status

bp = df.Blueprint()
MAX_ROUNDS = 8


@bp.orchestration_trigger(context_name="context")
def agent_run(context: df.DurableOrchestrationContext) -> Generator[Any, Any, dict[str, Any]]:
    job: dict[str, Any] = context.get_input()
    entity = session_entity(job["session_id"])
    turn_id = job["turn_instance_id"]
    for round_no in range(1, MAX_ROUNDS + 1):
        status(context, "request", round=round_no)
        reply = yield context.call_activity(
            "call_model", {"session_id": job["session_id"], "submission_id": job["submission_id"]}
        )
        if not reply["ok"]:
            return {"status": "failed", "answer": None, "reason": reply.get("message")}
        response = reply["response"]
        calls = response.get("tool_calls") or []
        committed = yield context.call_entity(entity, "commit", {
            "submission_id": job["submission_id"],
            "entries": [{"role": "assistant", "kind": "message", "text": response.get("content"),
                         "data": {"tool_calls": calls, "usage": response.get("usage")}}],
            "tasks": [{"id": turn_id, "kind": "turn", "status": "running", "phase": "request"}],
        })
        if not committed["ok"]:
            return {"status": "failed", "answer": None, "reason": committed["error"]["message"]}
        if not calls:
            return {"status": "completed", "answer": response.get("content")}
        return {"status": "failed", "answer": None, "reason": "tool calls are not supported yet"}
    return {"status": "failed", "answer": None, "reason": "max_rounds"}
