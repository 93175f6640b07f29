"""``tool_task``: one tool call as its own orchestration - intent before action.

Called by ``agent_round`` with ``{session_id, submission_id, turn_id, round_id, round, index,
nonce, call: {id, name, arguments}, limits}`` under the id ``kernel.ids.tool_task_id``. Returns an
envelope and never raises for tool trouble: ``{"ok", "status": completed|failed|interrupted|
cancelled, "kind", "message", "tool_call_id", "name"}``.

Phases (custom status ``{"phase", "tool", ...}``; task record ``tool`` under the round):

1. call: resolve the tool and validate its arguments (``kernel.tools.validate_call``, with the
   tool's pre-checks). A rejected call is answered at once with the error the model will see.
2. **call accepted** (commit 1): the intent with the final arguments and the tool's replay
   policy (entry kind ``tool_intent``), the task ``running``.
3. approval, for tools that need one: wait for ``approval:{tool task id}``, raced with
   ``AGENT_APPROVAL_TIMEOUT_S``; anything but ``approve`` (a timeout included) rejects it.
4. execute: ``send_notices`` is the sub-orchestration ``send_notices`` (id
   ``{tool task id}:notices``); every other tool is the ``execute_tool`` activity under the
   attempt record ``{nonce}:{submission}:{round}:{call}:1``. While another execution holds the
   record's lease, sleep on a durable timer and ask again (bounded).
5. **tool completed** (commit 2): the outcome (entry kind ``tool_outcome``) together with any
   document changes the tool asked for, so they apply exactly once; the task ``completing``.
6. **result applied** (commit 3): the result as the tool message the model reads (entry kind
   ``message`` with ``data.tool_call_id``), the task final.
"""

from __future__ import annotations

import json
from collections.abc import Generator
from datetime import timedelta
from typing import Any

import azure.durable_functions as df

from kernel import content, ids, tools
from kernel.turn_policy import TurnLimits
from orchestrators.agent_run import error_text, event_payload, set_status
from orchestrators.agent_turn import session_entity

bp = df.Blueprint()
MAX_LEASE_WAITS = 30
INLINE_ARGUMENTS_BYTES = 8 * 1024
INLINE_RESULT_BYTES = 12 * 1024


def _final_status(result: dict[str, Any]) -> str:
    if result.get("ok"):
        return "completed"
    return {"interrupted": "interrupted", "rejected": "cancelled"}.get(result.get("kind"), "failed")


def _small(result: dict[str, Any]) -> dict[str, Any]:
    """The result as entry data: whole when small, else a summary (entry data is capped)."""
    if len(json.dumps(result)) <= INLINE_RESULT_BYTES:
        return result
    return {
        "ok": bool(result.get("ok")),
        "kind": result.get("kind"),
        "truncated": True,
        "summary": str(result.get("summary") or result.get("message") or "")[:2000],
    }


def intent_entry(
    task_id: str, call: dict[str, Any], arguments: dict[str, Any], spec: tools.ToolSpec[Any]
) -> dict[str, Any]:
    data: dict[str, Any] = {
        "tool_task_id": task_id,
        "tool_call_id": call["id"],
        "name": spec.name,
        "policy": spec.policy,
        "requires_approval": spec.requires_approval,
    }
    encoded = json.dumps(arguments, sort_keys=True, ensure_ascii=False)
    if len(encoded.encode()) <= INLINE_ARGUMENTS_BYTES:
        data["arguments"] = arguments
    else:  # the full arguments live in this orchestration's input and the assistant entry
        data["arguments_digest"] = content.content_ref(encoded)
    return {"role": "tool", "kind": "tool_intent", "data": data}


def result_entry(
    task_id: str, call: dict[str, Any], result: dict[str, Any], result_ref: str | None
) -> dict[str, Any]:
    data = {
        "tool_call_id": call["id"],
        "tool_task_id": task_id,
        "name": call["name"],
        "ok": bool(result.get("ok")),
    }
    if result_ref:  # too large for entry data: the text is the stored JSON
        return {"role": "tool", "kind": "message", "content_ref": result_ref, "data": data}
    return {"role": "tool", "kind": "message", "data": {**data, "result": _small(result)}}


def envelope(call: dict[str, Any], result: dict[str, Any], status: str) -> dict[str, Any]:
    return {
        "ok": bool(result.get("ok")),
        "status": status,
        "kind": result.get("kind"),
        "message": str(result.get("message") or "")[:500],
        "tool_call_id": call["id"],
        "name": call["name"],
    }


@bp.orchestration_trigger(context_name="context")
def tool_task(context: df.DurableOrchestrationContext) -> Generator[Any, Any, dict[str, Any]]:
    job: dict[str, Any] = context.get_input()
    call, task_id, sub_id = job["call"], context.instance_id, job["submission_id"]
    limits = TurnLimits.from_dict(job["limits"])
    entity = session_entity(job["session_id"])
    name = str(call["name"])

    # call: resolve and validate
    set_status(context, "call", tool=name)
    valid, checked = tools.validate_call(name, call.get("arguments"))
    if not valid:
        status = "failed"
        yield context.call_entity(
            entity,
            "commit",
            {
                "submission_id": sub_id,
                "entries": [result_entry(task_id, call, checked, None)],
                "tasks": [
                    {
                        "id": task_id,
                        "status": status,
                        "phase": "rejected",
                        "reason": str(checked["message"])[:1000],
                    }
                ],
            },
        )
        set_status(context, "applied", tool=name, ok=False)
        return envelope(call, checked, status)
    spec = tools.TOOLS[name]

    # fact 1: call accepted
    accepted = yield context.call_entity(
        entity,
        "commit",
        {
            "submission_id": sub_id,
            "entries": [intent_entry(task_id, call, checked, spec)],
            "tasks": [{"id": task_id, "status": "running", "phase": "accepted"}],
        },
    )
    if not accepted["ok"]:
        return envelope(
            call, {"ok": False, "kind": "commit_failed", "message": error_text(accepted)}, "failed"
        )

    # approval
    approval = None
    if spec.requires_approval:
        event = f"approval:{task_id}"
        deadline = context.current_utc_datetime + timedelta(seconds=limits.approval_timeout_s)
        yield context.call_entity(
            entity,
            "commit",
            {
                "submission_id": sub_id,
                "tasks": [{"id": task_id, "status": "waiting", "phase": "approval"}],
            },
        )
        set_status(
            context,
            "approval",
            tool=name,
            event=event,
            until=deadline.strftime("%Y-%m-%dT%H:%M:%SZ"),
        )
        decided = context.wait_for_external_event(event)
        timeout = context.create_timer(deadline)
        winner = yield context.task_any([decided, timeout])
        if winner == decided:
            timeout.cancel()
            payload = event_payload(decided.result)
            approval = {"decision": payload.get("decision"), "request_id": payload.get("requestId")}
        else:
            approval = {"decision": "timeout", "request_id": None}

    # execute
    set_status(context, "execute", tool=name, approval=approval)
    documents: list[dict[str, Any]] = []
    result_ref = None
    runs = None
    if approval is not None and approval["decision"] != "approve":
        why = "timed out" if approval["decision"] == "timeout" else "was rejected"
        result = {"ok": False, "kind": "rejected", "message": f"the approval for {name} {why}"}
    elif name == "send_notices":
        try:
            result = yield context.call_sub_orchestrator(
                "send_notices",
                {
                    "session_id": job["session_id"],
                    "submission_id": sub_id,
                    "tool_task_id": task_id,
                    **checked,
                },
                ids.child_task_id(task_id, "notices"),
            )
        except Exception as exc:  # noqa: BLE001 - an unavailable workflow is a tool error
            result = {"ok": False, "kind": "tool_error", "message": f"send_notices failed: {exc}"}
        if not isinstance(result, dict):
            result = {"ok": False, "kind": "tool_error", "message": "send_notices gave no result"}
        elif not result.get("ok") and not result.get("message"):  # the model reads "message"
            error = result.get("error") or {}
            detail = error.get("message") if isinstance(error, dict) else error
            result = {**result, "message": str(detail or result.get("summary") or "")[:500]}
    else:
        ran: dict[str, Any] = {"status": "leased"}
        for wait_no in range(1, MAX_LEASE_WAITS + 1):
            try:
                ran = yield context.call_activity(
                    "execute_tool",
                    {
                        "key": f"{job['nonce']}:{sub_id}:{job['round']}:{job['index']}:1",
                        "tool_task_id": task_id,
                        "name": name,
                        "arguments": checked,
                        "policy": spec.policy,
                        "session_id": job["session_id"],
                        "timeout_s": limits.tool_timeout_s,
                        "lease_s": limits.tool_lease_s,
                    },
                )
            except Exception as exc:  # noqa: BLE001 - the model sees a failed tool, the turn goes on
                ran = {
                    "status": "done",
                    "result": {"ok": False, "kind": "tool_error", "message": str(exc)[:500]},
                }
            if ran["status"] != "leased":
                break
            set_status(context, "execute", tool=name, waiting_for_lease=wait_no)
            wake = context.current_utc_datetime + timedelta(
                seconds=min(float(ran["retry_after"]), limits.tool_lease_s) + 0.05
            )
            yield context.create_timer(wake)
        result = ran.get("result") or {
            "ok": False,
            "kind": "interrupted",
            "message": f"{name} is still held by another execution; its outcome is unknown",
        }
        documents, result_ref, runs = (
            ran.get("documents") or [],
            ran.get("result_ref"),
            ran.get("runs"),
        )

    # fact 2: tool completed (with the document changes it asked for)
    outcome_entry = {
        "role": "tool",
        "kind": "tool_outcome",
        "data": {
            "tool_task_id": task_id,
            "tool_call_id": call["id"],
            "name": name,
            "ok": bool(result.get("ok")),
            "kind": result.get("kind"),
            "runs": runs,
        },
    }
    completed = yield context.call_entity(
        entity,
        "commit",
        {
            "submission_id": sub_id,
            "entries": [outcome_entry],
            "documents": documents,
            "tasks": [{"id": task_id, "status": "completing", "phase": "completed"}],
        },
    )
    if not completed["ok"] and documents:  # the change was refused: the tool failed
        result = {
            "ok": False,
            "kind": (completed["error"] or {}).get("error", "commit_failed"),
            "message": error_text(completed),
        }
        outcome_entry["data"].update(ok=False, kind=result["kind"])
        completed = yield context.call_entity(
            entity,
            "commit",
            {
                "submission_id": sub_id,
                "entries": [outcome_entry],
                "tasks": [{"id": task_id, "status": "completing", "phase": "completed"}],
            },
        )
    elif completed["ok"] and documents:
        result = {**result, "versions": completed["result"]["document_versions"]}

    # fact 3: result applied
    status = _final_status(result)
    set_status(context, "applied", tool=name, ok=bool(result.get("ok")), approval=approval)
    yield context.call_entity(
        entity,
        "commit",
        {
            "submission_id": sub_id,
            "entries": [result_entry(task_id, call, result, result_ref)],
            "tasks": [
                {
                    "id": task_id,
                    "status": status,
                    "phase": "applied",
                    **(
                        {}
                        if result.get("ok")
                        else {"reason": f"{result.get('kind')}: {result.get('message')}"[:1000]}
                    ),
                }
            ],
        },
    )
    return envelope(call, result, status)
