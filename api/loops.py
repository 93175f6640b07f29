"""HTTP API of agent loops: declare, list, pause, resume, delete (``docs/loops.md``).

A loop is the orchestration ``loop:{session}:{loop}`` (``orchestrators/agent_loop.py``);
its runs are ordinary submissions of the session, visible in the session view. Declaring a
loop that already runs with the same declaration answers it again (200, ``duplicate``); a
different declaration under a running loop id is a conflict (409): delete it first.

A control request (pause, resume, delete; body optional, ``{"requestId"}`` makes a retry the same
request) is signalled to the ``loop_control`` entity of the loop's incarnation
(``entities/loop_control.py``), durable once accepted (202), and the loop is woken by its
control event; the loop takes it from the entity at the start of its next execution, so a
request that meets the loop between two executions is never dropped with the old one. A loop
between two executions (``ContinuedAsNew`` for a moment) is as live as before and after, as
the extension's own ``raise_event`` counts it: never a 404 in that window. A loop started by the
earlier code (no ``incarnation`` in its input) is still sent the action as the event.

Loops can also be declared by the setting ``AGENT_LOOPS`` (a JSON list of declarations, each
with its ``sessionId``): the timer function ``declare_configured_loops`` starts every one that
does not run, when the app starts and daily. It never deletes or replaces a running loop.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from datetime import UTC, datetime
from typing import Any

import azure.durable_functions as df
import azure.functions as func
from azure.durable_functions.models.OrchestrationRuntimeStatus import OrchestrationRuntimeStatus

from api import inputs, principals
from api.replies import failure, reply
from entities.session_pages import read_head
from kernel.common import ids
from kernel.common.errors import ConflictError, KernelError, NotFoundError, ValidationError
from kernel.loops import loop as loops

bp = df.Blueprint()
LEVEL = func.AuthLevel.FUNCTION  # as every sessions route (docs/security.md)
log = logging.getLogger("agent.loops")
# A loop continues as new at every occurrence and every control: between two executions its
# status reads ContinuedAsNew for a moment, and it is as live then as before and after (the
# extension's raise_event counts ContinuedAsNew as running, too).
LIVE = (
    OrchestrationRuntimeStatus.Pending,
    OrchestrationRuntimeStatus.Running,
    OrchestrationRuntimeStatus.ContinuedAsNew,
)


def _view(session_id: str, status: Any) -> dict[str, Any]:
    custom = inputs.status_object(status.custom_status)
    runtime = status.runtime_status.value if status.runtime_status else None
    return {
        "sessionId": session_id,
        "loopId": status.instance_id.removeprefix(loops.loop_prefix(session_id)),
        "instanceId": status.instance_id,
        "runtimeStatus": runtime,
        "state": custom.get("phase") or ("deleted" if runtime == "Completed" else "starting"),
        "next": custom.get("next"),
        "runs": custom.get("runs", 0),
        "lastSubmission": custom.get("last_submission"),
        "loop": custom.get("loop") or inputs.status_object(status.input_).get("spec"),
        "controls": custom.get("controls"),
        "generation": custom.get("generation"),
    }


async def _live(client: df.DurableOrchestrationClient, instance_id: str) -> Any:
    status = await client.get_status(instance_id)
    if status is None or status.runtime_status not in LIVE:
        return None
    return status


async def ensure_loop(
    client: df.DurableOrchestrationClient, session_id: str, spec: loops.LoopSpec
) -> tuple[Any, bool]:
    """(the running loop or None, started): start the loop unless it runs already."""
    instance_id = loops.loop_instance_id(session_id, spec.loop_id)
    running = await _live(client, instance_id)
    if running is not None:
        return running, False
    await client.start_new(
        "agent_loop",
        instance_id,
        # incarnation: the loop takes its controls from its own loop_control entity
        # (orchestrators/agent_loop.py), so none is lost between two executions; a loop
        # declared again after a delete never takes a control sent to the one before.
        {
            "session_id": session_id,
            "spec": spec.as_json(),
            "submit_first": True,
            "incarnation": uuid.uuid4().hex,
        },
    )
    return None, True


async def visible_session(req: func.HttpRequest, client: df.DurableOrchestrationClient) -> str:
    """The route's session id, as a 404 when the session belongs to another principal (the
    loops of a session are as private as the session: docs/security.md)."""
    session_id = inputs.session_id(req.route_params.get("sessionId"))
    principals.check(principals.caller(req), await read_head(client, session_id), session_id)
    return session_id


@bp.route(route="sessions/{sessionId}/loops", methods=["POST"], auth_level=LEVEL)
@bp.durable_client_input(client_name="client")
async def declare_loop(
    req: func.HttpRequest, client: df.DurableOrchestrationClient
) -> func.HttpResponse:
    try:
        session_id = await visible_session(req, client)
        spec = loops.parse_spec(inputs.json_object(req.get_body()), datetime.now(UTC))
        instance_id = loops.loop_instance_id(session_id, spec.loop_id)
        running, _ = await ensure_loop(client, session_id, spec)
        if running is not None:
            if inputs.status_object(running.input_).get("spec") != spec.as_json():
                raise ConflictError(
                    "loop_exists", f"loop {spec.loop_id!r} runs with another declaration", "loopId"
                )
            return reply({**_view(session_id, running), "duplicate": True}, 200)
    except KernelError as exc:
        return failure(exc)
    return reply(
        {
            "sessionId": session_id,
            "loopId": spec.loop_id,
            "instanceId": instance_id,
            "loop": spec.as_json(),
            "duplicate": False,
        },
        202,
    )


@bp.route(route="sessions/{sessionId}/loops", methods=["GET"], auth_level=LEVEL)
@bp.durable_client_input(client_name="client")
async def list_loops(
    req: func.HttpRequest, client: df.DurableOrchestrationClient
) -> func.HttpResponse:
    try:
        session_id = await visible_session(req, client)
    except KernelError as exc:
        return failure(exc)
    found = await client.get_status_by(instance_id_prefix=loops.loop_prefix(session_id))
    views = sorted((_view(session_id, s) for s in found), key=lambda v: v["loopId"])
    return reply({"sessionId": session_id, "loops": views})


async def _control(
    req: func.HttpRequest, client: df.DurableOrchestrationClient, action: str
) -> func.HttpResponse:
    try:
        session_id = await visible_session(req, client)
        loop_id = ids.validate_key(req.route_params.get("loopId"), "loopId")
        loops.control({}, action)
        request_id = _control_request_id(req.get_body())
        instance_id = loops.loop_instance_id(session_id, loop_id)
        running = await _live(client, instance_id)
        if running is None:
            raise NotFoundError("loop_not_found", f"no running loop {loop_id!r}", "loopId")
        incarnation = inputs.status_object(running.input_).get("incarnation")
        if incarnation:
            key = loops.control_entity_key(session_id, loop_id, str(incarnation))
            entity = df.EntityId(loops.CONTROL_ENTITY, key)
            await client.signal_entity(entity, "request", {"action": action, "id": request_id})
            event: dict[str, Any] = {"action": loops.WAKE}
        else:
            event = {"action": action}
        try:
            await client.raise_event(instance_id, loops.CONTROL_EVENT, event)
        except Exception as exc:  # the SDK raises a bare Exception for 404/410
            if await _live(client, instance_id) is not None:
                raise
            # Ended since it was read (deleted): a request it never took has nothing to act on.
            raise NotFoundError("loop_not_found", f"no running loop {loop_id!r}", "loopId") from exc
    except KernelError as exc:
        return failure(exc)
    return reply(
        {"sessionId": session_id, "loopId": loop_id, "action": action, "requestId": request_id},
        202,
    )


def _control_request_id(raw: bytes) -> str:
    """The body's ``requestId`` (a retry of one request is the same request), else a new one."""
    if not raw.strip():
        return uuid.uuid4().hex
    body = inputs.json_object(raw)
    unknown = sorted(set(body) - {"requestId"})
    if unknown:
        raise ValidationError("unknown_field", f"unknown field {unknown[0]!r}", unknown[0])
    if "requestId" not in body:
        return uuid.uuid4().hex
    return ids.validate_request_id(body["requestId"], "requestId")


@bp.route(route="sessions/{sessionId}/loops/{loopId}/{action}", methods=["POST"], auth_level=LEVEL)
@bp.durable_client_input(client_name="client")
async def control_loop(
    req: func.HttpRequest, client: df.DurableOrchestrationClient
) -> func.HttpResponse:
    action = str(req.route_params.get("action") or "")
    if action not in ("pause", "resume"):
        return failure(NotFoundError("unknown_action", "use pause or resume", "action"))
    return await _control(req, client, action)


@bp.route(route="sessions/{sessionId}/loops/{loopId}", methods=["DELETE"], auth_level=LEVEL)
@bp.durable_client_input(client_name="client")
async def delete_loop(
    req: func.HttpRequest, client: df.DurableOrchestrationClient
) -> func.HttpResponse:
    return await _control(req, client, "delete")


@bp.timer_trigger(schedule="0 0 3 * * *", arg_name="timer", run_on_startup=True)
@bp.durable_client_input(client_name="client")
async def declare_configured_loops(
    timer: func.TimerRequest, client: df.DurableOrchestrationClient
) -> None:
    """Start the loops of ``AGENT_LOOPS`` that do not run; a bad entry is logged, not fatal."""
    raw = os.environ.get("AGENT_LOOPS", "").strip()
    if not raw:
        return
    try:
        declared = json.loads(raw)
    except ValueError:
        log.error("AGENT_LOOPS is not JSON; no configured loop was started")
        return
    for number, entry in enumerate(declared if isinstance(declared, list) else [declared]):
        try:
            body = dict(entry)
            session_id = inputs.session_id(body.pop("sessionId", None))
            spec = loops.parse_spec(body, datetime.now(UTC))
            _, started = await ensure_loop(client, session_id, spec)
        except (KernelError, TypeError, ValueError) as exc:
            log.error("AGENT_LOOPS entry %d is not a valid loop: %s", number, exc)
            continue
        if started:
            log.info("started configured loop %s of session %s", spec.loop_id, session_id)
