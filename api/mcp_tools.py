"""The kernel as an MCP server: three MCP tools (``app.mcp_tool()``, azure-functions 1.26).

Served by the MCP extension of the Functions host on Azure (``/runtime/webhooks/mcp``, the
``mcp_extension`` system key) and by the durable host's MCP support; docs/mcp-kernel.md shows a
client configured against it. Each tool answers one JSON object as text:

* ``submit_to_session(session_id, text, request_id, wait_seconds=20)``: the same submission as
  ``POST /api/sessions/{id}/submissions`` (idempotent by ``request_id``: the same id again is
  the same submission, ``duplicate: true``). When the turn ends within ``wait_seconds`` (at most
  ``MAX_WAIT_S``) the answer is ``{"submissionId", "status", "answer", "reason"?}``; otherwise
  ``{"submissionId", "status", "finished": false, "follow"}``, where ``follow`` says how to read
  it later (``read_session``, or the HTTP route). Waiting is only reading: a client that gives
  up loses nothing, the turn goes on.
* ``read_session(session_id, submission_id="")``: the session's recent entries (role, kind,
  text; at most ``MAX_ENTRIES``), its submissions' statuses and the tool tasks waiting for an
  approval; with ``submission_id``, that submission's status and answer.
* ``answer_approval(session_id, tool_task_id, decision, request_id)``: ``approve`` or
  ``reject`` a tool task waiting for approval, as ``POST /api/sessions/{id}/approvals/{task}``
  does (one decision per task, first wins).

The logic is in plain functions over a durable client (``submit``, ``read``, ``approve``), so
tests call them directly; the decorated functions only adapt arguments. Errors are answered as
``{"error", "message", "field"}``, as the HTTP API's bodies are, never raised to the client.
"""

import asyncio
import json
import os
import time
from typing import Any

import azure.durable_functions as df

from api import inputs, operator, sessions
from entities import session_pages
from kernel.common import ids
from kernel.common.errors import KernelError
from kernel.common.statuses import FINAL_SUBMISSION_STATUSES
from kernel.session import reducer as core

bp = df.Blueprint()
MAX_WAIT_S = 60.0
POLL_S = 0.25
MAX_ENTRIES = 20


def _error(exc: KernelError) -> dict[str, Any]:
    return dict(exc.to_dict())


async def submission_status(
    client: df.DurableOrchestrationClient, session_id: str, submission_id: str
) -> dict[str, Any]:
    """A submission's view as ``GET .../submissions/{id}`` answers it."""
    state = await session_pages.read_head(client, session_id)
    if state is not None and submission_id in state.get("submissions", {}):
        return dict(core.submission_view(state, submission_id))
    sealed = session_pages.sealed_submission(state, submission_id)
    if sealed is not None:
        return {**sealed["submission"], "position": None}
    return await sessions.unheld_submission(client, session_id, submission_id)


async def turn_reason(
    client: df.DurableOrchestrationClient, session_id: str, submission_id: str
) -> str | None:
    """Why the submission's turn ended as it did (its turn task's reason), if it says."""
    state = await session_pages.read_head(client, session_id)
    task = ((state or {}).get("tasks") or {}).get(ids.turn_instance_id(session_id, submission_id))
    return task.get("reason") if isinstance(task, dict) else None


def _wait_bound(wait_seconds: object) -> float:
    try:
        wait = float(wait_seconds)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        wait = 20.0
    ceiling = float(os.environ.get("AGENT_MCP_MAX_WAIT_S") or MAX_WAIT_S)
    return max(0.0, min(wait, ceiling))


async def submit(
    client: df.DurableOrchestrationClient,
    session_id: str,
    text: str,
    request_id: str,
    wait_seconds: object = 20,
) -> dict[str, Any]:
    try:
        session_id = inputs.session_id(session_id)
        body = json.dumps({"requestId": request_id, "text": text}).encode()
        submission = inputs.submission(body)
        sub_id, status, duplicate = await sessions.start_once(client, session_id, submission)
        deadline = time.monotonic() + _wait_bound(wait_seconds)
        while True:
            view = await submission_status(client, session_id, sub_id)
            if view.get("status") in FINAL_SUBMISSION_STATUSES or time.monotonic() >= deadline:
                break
            await asyncio.sleep(POLL_S)
    except KernelError as exc:
        return _error(exc)
    answer: dict[str, Any] = {
        "sessionId": session_id,
        "submissionId": sub_id,
        "duplicate": duplicate,
        "status": view.get("status", status),
    }
    if view.get("status") in FINAL_SUBMISSION_STATUSES:
        reason = await turn_reason(client, session_id, sub_id)
        return {**answer, "finished": True, "answer": view.get("answer"), "reason": reason}
    follow = (
        f"call read_session with session_id {session_id!r} and submission_id {sub_id!r}, or GET "
        f"/api/sessions/{session_id}/submissions/{sub_id}; the turn goes on without the caller"
    )
    return {**answer, "finished": False, "follow": follow}


async def read(
    client: df.DurableOrchestrationClient, session_id: str, submission_id: str = ""
) -> dict[str, Any]:
    try:
        session_id = inputs.session_id(session_id)
        if submission_id:
            submission_id = inputs.submission_id(submission_id)
            return {
                "sessionId": session_id,
                **await submission_status(client, session_id, submission_id),
            }
        view = core.view(await sessions.current_state(client, session_id))
    except KernelError as exc:
        return _error(exc)
    entries = [
        {k: entry.get(k) for k in ("n", "role", "kind", "text")}
        for entry in view.get("entries", [])
        if entry.get("kind") == "message"
    ][-MAX_ENTRIES:]
    waiting = [
        {"toolTaskId": task_id, "phase": task.get("phase"), "reason": task.get("reason")}
        for task_id, task in (view.get("tasks") or {}).items()
        if task.get("phase") == "approval" or task.get("status") == "needs_attention"
    ]
    submissions = [
        {"submissionId": sub_id, "status": sub.get("status"), "answer": sub.get("answer")}
        for sub_id, sub in (view.get("submissions") or {}).items()
    ]
    return {
        "sessionId": session_id,
        "entries": entries,
        "submissions": submissions,
        "waiting": waiting,
        "counts": view.get("counts"),
    }


async def approve(
    client: df.DurableOrchestrationClient,
    session_id: str,
    tool_task_id: str,
    decision: str,
    request_id: str,
) -> dict[str, Any]:
    try:
        session_id = inputs.session_id(session_id)
        task_id = inputs.instance_id(tool_task_id, "tool_task_id")
        body = json.dumps({"requestId": request_id, "decision": decision}).encode()
        request_id, decision = inputs.decision(body, "decision", operator.DECISIONS)
    except KernelError as exc:
        return _error(exc)
    response = await operator.decide_approval(client, session_id, task_id, request_id, decision)
    answered: dict[str, Any] = json.loads(response.get_body() or b"{}")
    return {"status": response.status_code, **answered}


# --- the MCP tools --------------------------------------------------------------------------


@bp.mcp_tool()
@bp.durable_client_input(client_name="client")
async def submit_to_session(
    session_id: str,
    text: str,
    request_id: str,
    client: df.DurableOrchestrationClient,
    wait_seconds: int = 20,
) -> str:
    """Submit a message to a durable agent session (created on first use). request_id makes
    it idempotent: the same id again is the same submission. Answers the agent's reply when
    the turn ends within wait_seconds, else how to follow it."""
    return json.dumps(await submit(client, session_id, text, request_id, wait_seconds))


@bp.mcp_tool()
@bp.durable_client_input(client_name="client")
async def read_session(
    session_id: str, client: df.DurableOrchestrationClient, submission_id: str = ""
) -> str:
    """Read a durable agent session: recent messages, submissions and what waits for a
    person; or, with submission_id, that submission's status and answer."""
    return json.dumps(await read(client, session_id, submission_id))


@bp.mcp_tool()
@bp.durable_client_input(client_name="client")
async def answer_approval(
    session_id: str,
    tool_task_id: str,
    decision: str,
    request_id: str,
    client: df.DurableOrchestrationClient,
) -> str:
    """Approve or reject (decision: approve | reject) a tool task of the session that waits
    for a person's approval; the first decision counts."""
    return json.dumps(await approve(client, session_id, tool_task_id, decision, request_id))
