"""HTTP API of skills: register, read, list, versions; start, read, list, signal, approve and
cancel runs (``docs/skills.md``).

* ``POST /api/skills`` registers a definition (``kernel.skills.skill``): 201 with the new version,
  200 ``created: false`` when the latest version already holds the same definition, 400
  ``invalid_skill`` naming *every* problem (``problems: [{"field", "message"}]``) and storing
  nothing.
* ``GET /api/skills``, ``GET /api/skills/{name}`` (the latest version and the list of versions),
  ``GET /api/skills/{name}/versions/{version}``.
* ``POST /api/skills/{name}/runs`` ``{"requestId", "input", "version"?}`` starts a run of the
  latest (or the given) version: 202 with ``runId`` / ``instanceId``; the same ``requestId``
  again answers 200 ``duplicate`` and starts nothing. The run pins its version's definition
  in its input: registering a new version changes only runs started after it.
* ``GET /api/skills/{name}/runs``, ``GET /api/skills/{name}/runs/{runId}``: the run's status
  (``running`` | ``waiting`` | ``approval`` | ``retry`` | ``completed`` | ``failed`` |
  ``cancelled``), its step and, once ended, every step's result and output.
* ``POST .../runs/{runId}/events/{event}`` ``{"payload"}`` raises the event a step of the run
  waits for (202); ``POST .../runs/{runId}/approvals/{stepId}`` ``{"requestId", "decision"}``
  decides an approval step (the master key, as every approval); ``POST .../runs/{runId}/cancel``
  terminates the run and its join branches (202).

Auth as every other route of the app: the function key (approvals: the master key). Skills are
app-wide, not owned by a session: a run outlives the session that registered its skill.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from datetime import UTC, datetime
from typing import Any

import azure.durable_functions as df
import azure.functions as func

from adapters import skill_store
from api import inputs, principals
from api.replies import failure, reply
from kernel.common import ids
from kernel.common.errors import ConflictError, KernelError, NotFoundError, ValidationError
from kernel.skills import skill as skills
from kernel.turn.policy import TurnLimits, TurnSettingsError

bp = df.Blueprint()
LEVEL = func.AuthLevel.FUNCTION  # as every sessions route (docs/security.md)
LIVE = ("Pending", "Running")
RUN_KEYS = ("requestId", "input", "version")


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _record_view(record: dict[str, Any], versions: list[int]) -> dict[str, Any]:
    return {
        "name": record["name"],
        "version": record["version"],
        "latest": versions[-1] if versions else record["version"],
        "versions": versions,
        "digest": record["digest"],
        "registeredAt": record["registered_at"],
        "registeredBy": record["registered_by"],
        "skill": record["definition"],
    }


def _skill_not_found(name: str) -> NotFoundError:
    return NotFoundError("skill_not_found", f"no skill {name!r}", "name")


async def _store_call(call: Any, *args: Any) -> Any:
    return await asyncio.to_thread(call, *args)


# --- skills ------------------------------------------------------------------------------------


@bp.route(route="skills", methods=["POST"], auth_level=LEVEL)
async def register_skill(req: func.HttpRequest) -> func.HttpResponse:
    try:
        who = principals.caller(req)
        skill = skills.parse(inputs.json_object(req.get_body()))
        by = {"via": "api", **({"principal": who.principal} if who.principal else {})}
        store = skill_store.default_skill_store()
        record, created = await _store_call(skill_store.register, store, skill, by, _now())
        versions = await _store_call(store.versions, skill.name)
    except KernelError as exc:
        return failure(exc)
    return reply({**_record_view(record, versions), "created": created}, 201 if created else 200)


@bp.route(route="skills", methods=["GET"], auth_level=LEVEL)
async def list_skills(req: func.HttpRequest) -> func.HttpResponse:
    store = skill_store.default_skill_store()
    listed = []
    for name in await _store_call(store.names):
        versions = await _store_call(store.versions, name)
        record = await _store_call(store.read, name, versions[-1])
        listed.append(
            {
                "name": name,
                "latest": versions[-1],
                "versions": versions,
                "description": (record or {}).get("definition", {}).get("description", ""),
            }
        )
    return reply({"skills": listed})


async def _version(name: str, version: int | None) -> tuple[dict[str, Any], list[int]]:
    store = skill_store.default_skill_store()
    versions = await _store_call(store.versions, name)
    if not versions:
        raise _skill_not_found(name)
    record = await _store_call(store.read, name, versions[-1] if version is None else version)
    if record is None:
        raise NotFoundError(
            "version_not_found", f"skill {name!r} has no version {version}", "version"
        )
    return record, versions


def _version_number(value: object, field: str = "version") -> int:
    if isinstance(value, bool):
        value = None
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if not isinstance(value, int) or value < 1:
        raise ValidationError("invalid_version", "a version is a whole number from 1", field)
    return value


@bp.route(route="skills/{name}", methods=["GET"], auth_level=LEVEL)
async def get_skill(req: func.HttpRequest) -> func.HttpResponse:
    try:
        name = skills.valid_name(req.route_params.get("name"))
        record, versions = await _version(name, None)
    except KernelError as exc:
        return failure(exc)
    return reply(_record_view(record, versions))


@bp.route(route="skills/{name}/versions/{version}", methods=["GET"], auth_level=LEVEL)
async def get_skill_version(req: func.HttpRequest) -> func.HttpResponse:
    try:
        name = skills.valid_name(req.route_params.get("name"))
        version = _version_number(req.route_params.get("version"))
        record, versions = await _version(name, version)
    except KernelError as exc:
        return failure(exc)
    return reply(_record_view(record, versions))


# --- runs --------------------------------------------------------------------------------------


def run_settings() -> dict[str, Any]:
    """The bounds a run carries in its input (so a replay never reads a setting)."""
    try:
        limits = TurnLimits.from_settings(os.environ)
    except TurnSettingsError as exc:
        raise ValidationError("invalid_settings", str(exc), None) from exc
    return {
        "lease_s": limits.tool_lease_s,
        "tool_timeout_s": limits.tool_timeout_s,
        "model_timeout_s": limits.model_timeout_s,
    }


def _run_body(raw: bytes) -> tuple[str, dict[str, Any], int | None]:
    body = inputs.json_object(raw)
    for key in body:
        if key not in RUN_KEYS:
            raise ValidationError("unknown_field", f"unknown field {key!r}", key)
    request_id = ids.validate_request_id(body.get("requestId"), "requestId")
    given = body.get("input", {})
    if not isinstance(given, dict):
        raise ValidationError("invalid_input", "input is a JSON object", "input")
    version = body.get("version")
    if version is not None and (isinstance(version, bool) or not isinstance(version, int)):
        raise ValidationError("invalid_version", "version is a whole number from 1", "version")
    return request_id, given, None if version is None else _version_number(version)


def _status_name(runtime: str | None, custom: dict[str, Any], output: dict[str, Any]) -> str:
    if runtime in LIVE:
        return str(custom.get("phase") or "running")
    if runtime == "Completed":
        return str(output.get("status") or "completed")
    if runtime == "Terminated":
        return "cancelled"
    return "failed"


def run_view(status: Any) -> dict[str, Any]:
    given = inputs.status_object(status.input_)
    custom = inputs.status_object(status.custom_status)
    output = inputs.status_object(status.output)
    runtime = status.runtime_status.value if status.runtime_status else None
    view: dict[str, Any] = {
        "skill": given.get("skill"),
        "version": given.get("version"),
        "runId": given.get("run_id"),
        "instanceId": status.instance_id,
        "runtimeStatus": runtime,
        "status": _status_name(runtime, custom, output),
        "step": custom.get("step"),
        "custom": custom,
        "input": given.get("input"),
    }
    if output:
        view.update(
            steps=output.get("steps"),
            outputs=output.get("outputs"),
            failedStep=output.get("failed_step"),
        )
    elif runtime == "Terminated":
        view["reason"] = status.output
    return view


async def _run_status(
    client: df.DurableOrchestrationClient, name: str, run: str
) -> tuple[str, Any]:
    instance = skills.run_instance_id(name, run)
    status = await client.get_status(instance, show_input=True)
    if not status or not status.runtime_status:
        raise NotFoundError("run_not_found", f"skill {name!r} has no run {run!r}", "runId")
    return instance, status


def _route_run(req: func.HttpRequest) -> tuple[str, str]:
    name = skills.valid_name(req.route_params.get("name"))
    return name, ids.validate_key(req.route_params.get("runId"), "runId")


@bp.route(route="skills/{name}/runs", methods=["POST"], auth_level=LEVEL)
@bp.durable_client_input(client_name="client")
async def start_run(
    req: func.HttpRequest, client: df.DurableOrchestrationClient
) -> func.HttpResponse:
    try:
        name = skills.valid_name(req.route_params.get("name"))
        request_id, given, version = _run_body(req.get_body())
        run = skills.run_id(name, request_id)
        instance = skills.run_instance_id(name, run)
        existing = await client.get_status(instance, show_input=True)
        if existing and existing.runtime_status:
            return reply({**run_view(existing), "duplicate": True}, 200)
        record, _ = await _version(name, version)
        skill = skills.Skill.model_validate(record["definition"])
        if problems := skills.run_input_problems(skill, given):
            raise skills.SkillInvalid(problems, "invalid_run_input")
        job = {
            "skill": name,
            "version": record["version"],
            "definition": record["definition"],
            "input": given,
            "run_id": run,
            "request_id": request_id,
            "settings": run_settings(),
        }
        try:
            await client.start_new("skill_run", instance, job)
        except Exception:  # the SDK raises bare Exceptions: a concurrent first request won
            found = await client.get_status(instance, show_input=True)
            if not found or not found.runtime_status:
                raise
            return reply({**run_view(found), "duplicate": True}, 200)
    except KernelError as exc:
        return failure(exc)
    body = {
        "skill": name,
        "version": record["version"],
        "runId": run,
        "instanceId": instance,
        "status": "accepted",
        "duplicate": False,
    }
    return reply(body, 202)


@bp.route(route="skills/{name}/runs", methods=["GET"], auth_level=LEVEL)
@bp.durable_client_input(client_name="client")
async def list_runs(
    req: func.HttpRequest, client: df.DurableOrchestrationClient
) -> func.HttpResponse:
    try:
        name = skills.valid_name(req.route_params.get("name"))
    except KernelError as exc:
        return failure(exc)
    prefix = skills.run_prefix(name)
    found = await client.get_status_by(instance_id_prefix=prefix)
    runs = [s for s in found if ":" not in s.instance_id.removeprefix(prefix)]  # not branches
    views = []
    for status in runs:
        full = await client.get_status(status.instance_id, show_input=True)
        if full and full.runtime_status:
            views.append({k: v for k, v in run_view(full).items() if k not in ("steps", "outputs")})
    return reply({"skill": name, "runs": sorted(views, key=lambda v: v["instanceId"])})


@bp.route(route="skills/{name}/runs/{runId}", methods=["GET"], auth_level=LEVEL)
@bp.durable_client_input(client_name="client")
async def get_run(
    req: func.HttpRequest, client: df.DurableOrchestrationClient
) -> func.HttpResponse:
    try:
        name, run = _route_run(req)
        _, status = await _run_status(client, name, run)
    except KernelError as exc:
        return failure(exc)
    return reply(run_view(status))


async def _live_run(
    client: df.DurableOrchestrationClient, req: func.HttpRequest
) -> tuple[str, str, skills.Skill]:
    """(run instance id, run id, its pinned skill) of a run that has not ended, else 404/409."""
    name, run = _route_run(req)
    instance, status = await _run_status(client, name, run)
    if status.runtime_status.value not in LIVE:
        raise ConflictError("run_ended", f"run {run!r} has ended", "runId")
    skill = skills.Skill.model_validate(inputs.status_object(status.input_)["definition"])
    return instance, run, skill


async def _waiting_instance(
    client: df.DurableOrchestrationClient, instance: str, skill: skills.Skill, step_id: str
) -> tuple[str, dict[str, Any]]:
    """The instance that runs ``step_id`` (the run, or a join branch) and its custom status."""
    target = skills.instance_of_step(skill, instance, step_id) or instance
    status = await client.get_status(target)
    if not status or not status.runtime_status or status.runtime_status.value not in LIVE:
        raise ConflictError("not_waiting", f"step {step_id!r} is not running", "stepId")
    return target, inputs.status_object(status.custom_status)


@bp.route(route="skills/{name}/runs/{runId}/events/{event}", methods=["POST"], auth_level=LEVEL)
@bp.durable_client_input(client_name="client")
async def raise_run_event(
    req: func.HttpRequest, client: df.DurableOrchestrationClient
) -> func.HttpResponse:
    try:
        instance, run, skill = await _live_run(client, req)
        event = str(req.route_params.get("event") or "")
        body = inputs.json_object(req.get_body()) if req.get_body() else {}
        unknown = sorted(set(body) - {"payload"})
        if unknown:
            raise ValidationError("unknown_field", f"unknown field {unknown[0]!r}", unknown[0])
        step = skills.event_step(skill, event)
        if step is None:
            raise NotFoundError(
                "event_not_found", f"no step of this run waits for {event!r}", "event"
            )
        target = skills.instance_of_step(skill, instance, step.id) or instance
        if target != instance:  # a branch exists only once its join started
            target, _ = await _waiting_instance(client, instance, skill, step.id)
        # An event raised before its step waits is kept by the run until the step asks for it.
        await client.raise_event(target, event, body.get("payload"))
    except KernelError as exc:
        return failure(exc)
    return reply({"runId": run, "event": event, "step": step.id, "instanceId": target}, 202)


@bp.route(
    route="skills/{name}/runs/{runId}/approvals/{stepId}",
    methods=["POST"],
    auth_level=func.AuthLevel.ADMIN,  # as every approval (docs/security.md)
)
@bp.durable_client_input(client_name="client")
async def decide_run_approval(
    req: func.HttpRequest, client: df.DurableOrchestrationClient
) -> func.HttpResponse:
    try:
        instance, run, skill = await _live_run(client, req)
        step_id = ids.validate_key(req.route_params.get("stepId"), "stepId")
        request_id, decision = inputs.decision(req.get_body(), "decision", ("approve", "reject"))
        step = skills.find_step(skill, step_id)
        if not isinstance(step, skills.ApprovalStep):
            raise NotFoundError("step_not_found", f"no approval step {step_id!r}", "stepId")
        target, custom = await _waiting_instance(client, instance, skill, step_id)
        taken = (custom.get("decided") or {}).get(step_id)
        if taken == request_id:
            return reply(
                {"runId": run, "step": step_id, "decision": decision, "duplicate": True}, 202
            )
        if taken is not None:
            raise ConflictError(
                "already_decided", f"step {step_id!r} was decided already", "stepId"
            )
        if custom.get("phase") != "approval" or custom.get("step") != step_id:
            raise ConflictError(
                "not_waiting", f"step {step_id!r} is not waiting for a decision", "stepId"
            )
        payload = {"requestId": request_id, "decision": decision}
        await client.raise_event(target, f"approval:{step_id}", payload)
    except KernelError as exc:
        return failure(exc)
    return reply({"runId": run, "step": step_id, "decision": decision, "duplicate": False}, 202)


@bp.route(route="skills/{name}/runs/{runId}/cancel", methods=["POST"], auth_level=LEVEL)
@bp.durable_client_input(client_name="client")
async def cancel_run(
    req: func.HttpRequest, client: df.DurableOrchestrationClient
) -> func.HttpResponse:
    try:
        instance, run, skill = await _live_run(client, req)
        body = inputs.json_object(req.get_body()) if req.get_body() else {}
        reason = str(body.get("reason") or "cancelled through the API")[:500]
    except KernelError as exc:
        return failure(exc)
    try:
        await client.terminate(instance, reason)
    except Exception:  # noqa: BLE001 - the run ended a moment ago
        return failure(ConflictError("run_ended", f"run {run!r} has ended", "runId"))
    # The run first, so it does not react to its branches ending; then the branches, which
    # would otherwise keep running with nobody to join them.
    for status in await client.get_status_by(instance_id_prefix=f"{instance}:"):
        if status.runtime_status and status.runtime_status.value in LIVE:
            # One that ended by itself in the meantime refuses the terminate: nothing to stop.
            with contextlib.suppress(Exception):
                await client.terminate(status.instance_id, reason)
    # A terminated run runs no more code: the slots of declared limits it held or waited for
    # are released by an instance of its own, so the next in line need not wait for the lease.
    if held := skills.limit_holders(skill, instance):
        with contextlib.suppress(Exception):  # a second cancel finds it started: it ran once
            await client.start_new("skill_run", f"{instance}:release", {"release": held})
    return reply({"runId": run, "instanceId": instance, "cancelled": True, "reason": reason}, 202)
