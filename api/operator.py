"""HTTP API for people in the loop: operator decisions on parked turns, and tool approvals.

* ``POST /api/sessions/{sessionId}/submissions/{submissionId}/operator``
  ``{"requestId", "action": "retry"|"abort"}``: for a turn parked as ``needs_attention``, raise
  the run's operator event (its unique name is in the run's custom status). ``retry`` runs the
  parked round again from the last committed round; ``abort`` ends the turn as ``failed``.
* ``POST /api/sessions/{sessionId}/tools/{toolTaskId}/operator``
  ``{"requestId", "action": "retry"|"abort"}``: for an MCP tool task parked as
  ``needs_attention`` (an interrupted call of a server with ``onInterrupted: "attention"``,
  docs/tools.md), raise its operator event: ``retry`` sends the call once more, ``abort`` ends
  it as ``interrupted``.
* ``POST /api/sessions/{sessionId}/approvals/{toolTaskId}``
  ``{"requestId", "decision": "approve"|"reject"}``: for a tool task waiting for approval,
  raise ``approval:{toolTaskId}``.

Both are ``admin``-level routes: only the master key reaches them (docs/security.md). An
approver without it decides through the link the kernel mailed (``api/approval_links.py``);
a decision by either path claims the task's one decision marker first, so the other path is
refused afterwards (409 ``already_decided``).

Both answer 202 ``{"accepted": true, "duplicate", ...}`` once the event is durable; repeating a
request with the same ``requestId`` is harmless and answers 202 with ``"duplicate": true``
(the orchestration publishes the decision it took, with its request id, in its custom status).
409 when the target is not waiting for that decision (a second, different decision included);
404 when there is no such turn or tool task in this session; 400 for a bad body, with the
``{"error", "message", "field"}`` body every API error has.
"""

from __future__ import annotations

from typing import Any

import azure.durable_functions as df
import azure.functions as func

from api import approval_links, inputs
from api.replies import failure, reply
from kernel.common import ids
from kernel.common.errors import ConflictError, KernelError, NotFoundError

bp = df.Blueprint()
ACTIONS = ("retry", "abort")
DECISIONS = ("approve", "reject")


async def _custom_status(
    client: df.DurableOrchestrationClient, instance_id: str, session_id: str
) -> tuple[str, dict[str, Any]] | None:
    """(runtime status, custom status) of an instance that belongs to ``session_id``."""
    status = await client.get_status(instance_id, show_input=True)
    if not status or not status.runtime_status:
        return None
    if inputs.status_object(status.input_).get("session_id") != session_id:
        return None
    return status.runtime_status.value, inputs.status_object(status.custom_status)


async def _decide(
    client: df.DurableOrchestrationClient,
    instance_id: str,
    session_id: str,
    waiting_phase: str,
    decided_key: str,
    request_id: str,
    payload: dict[str, Any],
) -> func.HttpResponse:
    found = await _custom_status(client, instance_id, session_id)
    if found is None:
        message = f"no {waiting_phase} target {instance_id!r} in this session"
        return failure(NotFoundError("not_found", message, None))
    runtime, custom = found
    taken = custom.get(decided_key) or {}
    if taken.get("request_id") == request_id:
        return reply(
            {"accepted": True, "duplicate": True, "instanceId": instance_id, **payload}, 202
        )
    if runtime != "Running" or custom.get("phase") != waiting_phase or not custom.get("event"):
        message = f"{instance_id!r} is not waiting for a decision"
        return failure(ConflictError("not_waiting", message, None))
    await client.raise_event(instance_id, custom["event"], {"requestId": request_id, **payload})
    return reply({"accepted": True, "duplicate": False, "instanceId": instance_id, **payload}, 202)


async def _claim_decision(
    client: df.DurableOrchestrationClient, task_id: str, session_id: str, request_id: str
) -> func.HttpResponse | None:
    """Claim the task's one decision for this request id while the task waits for it; the
    refusal when a link (or another request) decided first, else None (go on and decide)."""
    found = await _custom_status(client, task_id, session_id)
    if found is None or found[1].get("phase") != "approval":
        return None  # _decide answers: a duplicate, not waiting, or not found
    if await approval_links.claim(task_id, f"admin:{request_id}") == "taken":
        message = f"{task_id!r} was decided already"
        return failure(ConflictError("already_decided", message, None))
    return None


@bp.route(
    route="sessions/{sessionId}/submissions/{submissionId}/operator",
    methods=["POST"],
    auth_level=func.AuthLevel.ADMIN,
)
@bp.durable_client_input(client_name="client")
async def operator(
    req: func.HttpRequest, client: df.DurableOrchestrationClient
) -> func.HttpResponse:
    try:
        session_id = ids.validate_session_id(req.route_params.get("sessionId"), "sessionId")
        submission_id = ids.validate_key(req.route_params.get("submissionId"), "submissionId")
        request_id, action = inputs.decision(req.get_body(), "action", ACTIONS)
    except KernelError as exc:
        return failure(exc)
    run_id = ids.child_task_id(ids.turn_instance_id(session_id, submission_id), "run")
    return await _decide(
        client, run_id, session_id, "needs_attention", "operator", request_id, {"action": action}
    )


@bp.route(
    route="sessions/{sessionId}/tools/{toolTaskId}/operator",
    methods=["POST"],
    auth_level=func.AuthLevel.ADMIN,
)
@bp.durable_client_input(client_name="client")
async def tool_operator(
    req: func.HttpRequest, client: df.DurableOrchestrationClient
) -> func.HttpResponse:
    try:
        session_id = ids.validate_session_id(req.route_params.get("sessionId"), "sessionId")
        task_id = inputs.instance_id(req.route_params.get("toolTaskId"), "toolTaskId")
        request_id, action = inputs.decision(req.get_body(), "action", ACTIONS)
    except KernelError as exc:
        return failure(exc)
    return await _decide(
        client, task_id, session_id, "needs_attention", "operator", request_id, {"action": action}
    )


@bp.route(
    route="sessions/{sessionId}/approvals/{toolTaskId}",
    methods=["POST"],
    auth_level=func.AuthLevel.ADMIN,
)
@bp.durable_client_input(client_name="client")
async def approval(
    req: func.HttpRequest, client: df.DurableOrchestrationClient
) -> func.HttpResponse:
    try:
        session_id = ids.validate_session_id(req.route_params.get("sessionId"), "sessionId")
        task_id = inputs.instance_id(req.route_params.get("toolTaskId"), "toolTaskId")
        request_id, decision = inputs.decision(req.get_body(), "decision", DECISIONS)
    except KernelError as exc:
        return failure(exc)
    return await decide_approval(client, session_id, task_id, request_id, decision)


async def decide_approval(
    client: df.DurableOrchestrationClient,
    session_id: str,
    task_id: str,
    request_id: str,
    decision: str,
) -> func.HttpResponse:
    """The approval route's answer, for any caller that holds the admin's right (the route,
    the kernel's MCP tool ``answer_approval``)."""
    refused = await _claim_decision(client, task_id, session_id, request_id)
    if refused is not None:
        return refused
    return await _decide(
        client, task_id, session_id, "approval", "approval", request_id, {"decision": decision}
    )
