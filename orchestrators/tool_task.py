"""``tool_task``: one tool call as its own orchestration - intent before action.

Called by ``agent_round`` with ``{session_id, submission_id, turn_id, round_id, round, index,
nonce, call: {id, name, arguments}, limits, tools?, approval_links?, declarations?}`` under
the id ``kernel.common.ids.tool_task_id``. Returns an envelope and never raises for tool trouble:
``{"ok", "status": completed|failed|interrupted|cancelled, "kind", "message", "tool_call_id",
"name"}``.

Phases (custom status ``{"phase", "tool", ...}``; task record ``tool`` under the round):

1. call: resolve the tool and validate its arguments (``kernel.turn.tools.validate_call``, with the
   tool's pre-checks). A rejected call is answered at once with the error the model will see;
   so is a call of a tool outside the run's declared ``tools`` (``tool_not_allowed``).
2. **call accepted** (commit 1): the intent with the final arguments and the tool's replay
   policy (entry kind ``tool_intent``), the task ``running``.
3. approval, for tools that need one: wait for ``approval:{tool task id}``, raced with
   ``AGENT_APPROVAL_TIMEOUT_S``; anything but ``approve`` (a timeout included) rejects it.
   A task started with ``approval_links`` first has ``issue_approval`` mail the approver one
   link per decision and publishes only the links' token hashes (``token_hashes``) in its
   status while it waits; tasks started before that flag existed wait without links, so
   their histories replay unchanged.
4. execute: ``send_notices`` is the sub-orchestration ``send_notices`` (id
   ``{tool task id}:notices``); every other tool is the ``execute_tool`` activity under the
   attempt record ``{nonce}:{submission}:{round}:{call}:1``. While another execution holds the
   record's lease, sleep on a durable timer and ask again (bounded).
   A task started with ``declarations`` applies the tool's catalogue declarations
   (``kernel/turn/tools.py``, docs/loops.md): ``concurrency`` takes a slot of the ``limiter``
   entity of the filled key first (``orchestrators/limits.limited``) and holds it across
   every try; ``failure`` runs the tool under its ``FailurePolicy`` (``orchestrators/failures
   .run_kind``): a ``tool_error`` is tried again under the attempt records ``...:2``, ``...:3``
   after durable timers, and when every try failed the handler runs once as
   ``{tool task id}:on-failure``; the task record carries the ``tier`` (``retried``,
   ``handled``, ``needs_attention``, or ``ok``). Tasks started before that flag existed run
   the tool once and unlimited, so their histories replay unchanged.
5. **tool completed** (commit 2): the outcome (entry kind ``tool_outcome``) together with any
   document changes the tool asked for, so they apply exactly once; the task ``completing``.
6. **result applied** (commit 3): the result as the tool message the model reads (entry kind
   ``message`` with ``data.tool_call_id``), the task final.
"""

from __future__ import annotations

import json
from collections.abc import Generator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import azure.durable_functions as df

from kernel.common import content, ids
from kernel.common import limits as kernel_limits
from kernel.common.statuses import TaskStatus
from kernel.turn import tools
from kernel.turn.policy import TurnLimits
from orchestrators import limits as declared_limits
from orchestrators.failures import TryFailed, run_kind
from orchestrators.steps import (
    child_version,
    error_text,
    event_or_deadline,
    event_payload,
    session_entity,
    set_status,
)

bp = df.Blueprint()
MAX_LEASE_WAITS = 30
INLINE_ARGUMENTS_BYTES = 8 * 1024
INLINE_RESULT_BYTES = 12 * 1024


Gen = Generator[Any, Any, Any]
RETRYABLE_KINDS = frozenset({"tool_error"})  # the tool raised: another try may succeed
FINAL_BY_KIND: dict[Any, TaskStatus] = {
    "interrupted": TaskStatus.INTERRUPTED,
    "rejected": TaskStatus.CANCELLED,
    "cancelled": TaskStatus.CANCELLED,  # an MCP task stopped by the turn's cancel
}


def _final_status(result: dict[str, Any]) -> TaskStatus:
    if result.get("ok"):
        return TaskStatus.COMPLETED
    return FINAL_BY_KIND.get(result.get("kind"), TaskStatus.FAILED)


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


@dataclass(frozen=True, slots=True)
class ToolJob:
    """One tool task's input, read once: the call, its ids and the turn's limits."""

    task_id: str
    job: dict[str, Any]
    call: dict[str, Any]
    name: str
    limits: TurnLimits
    entity: df.EntityId

    @classmethod
    def of(cls, task_id: str, job: dict[str, Any]) -> ToolJob:
        call = job["call"]
        limits = TurnLimits.from_dict(job["limits"])
        return cls(task_id, job, call, str(call["name"]), limits, session_entity(job["session_id"]))

    @property
    def allowed(self) -> list[str] | None:
        """The run's declared tools (a loop's), or None: the whole catalogue."""
        declared = self.job.get("tools")
        return list(declared) if declared is not None else None

    @property
    def submission_id(self) -> str:
        return str(self.job["submission_id"])

    def commit(self, **parts: Any) -> dict[str, Any]:
        """A session commit of this submission."""
        return {"submission_id": self.submission_id, **parts}


@dataclass(slots=True)
class Ran:
    """What the execute phase produced: the result, and for ``execute_tool`` its extras."""

    result: dict[str, Any]
    documents: list[dict[str, Any]] = field(default_factory=list)
    result_ref: str | None = None
    runs: int | None = None
    tier: str | None = None  # under a failure policy: ok | retried | handled | needs_attention
    limit: dict[str, Any] | None = None  # under a declared limit: its key and ticket


@bp.orchestration_trigger(context_name="context")
def tool_task(context: df.DurableOrchestrationContext) -> Generator[Any, Any, dict[str, Any]]:
    tool = ToolJob.of(context.instance_id, context.get_input())
    set_status(context, "call", tool=tool.name)
    valid, checked = tools.validate_call(tool.name, tool.call.get("arguments"), tool.allowed)
    if not valid:
        return (yield from reject_call(context, tool, checked))
    spec = tools.TOOLS[tool.name]
    accepted = yield from accept_call(context, tool, checked, spec)
    if not accepted["ok"]:
        failure = {"ok": False, "kind": "commit_failed", "message": error_text(accepted)}
        return envelope(tool.call, failure, TaskStatus.FAILED)
    approval = (yield from await_approval(context, tool)) if spec.requires_approval else None
    set_status(context, "execute", tool=tool.name, approval=approval)
    ran = yield from execute(context, tool, checked, spec, approval)
    result = yield from record_outcome(context, tool, ran)
    return (yield from apply_result(context, tool, result, ran, approval))


def reject_call(context: df.DurableOrchestrationContext, tool: ToolJob, checked: Any) -> Gen:
    """A call that failed validation: its error is its result, in one commit."""
    status = TaskStatus.FAILED
    yield context.call_entity(
        tool.entity,
        "commit",
        tool.commit(
            entries=[result_entry(tool.task_id, tool.call, checked, None)],
            tasks=[
                {
                    "id": tool.task_id,
                    "status": status,
                    "phase": "rejected",
                    "reason": str(checked["message"])[:1000],
                }
            ],
        ),
    )
    set_status(context, "applied", tool=tool.name, ok=False)
    return envelope(tool.call, checked, status)


def accept_call(
    context: df.DurableOrchestrationContext,
    tool: ToolJob,
    checked: dict[str, Any],
    spec: tools.ToolSpec[Any],
) -> Gen:
    """Fact 1, call accepted: the intent with the final arguments and the replay policy."""
    return (
        yield context.call_entity(
            tool.entity,
            "commit",
            tool.commit(
                entries=[intent_entry(tool.task_id, tool.call, checked, spec)],
                tasks=[{"id": tool.task_id, "status": TaskStatus.RUNNING, "phase": "accepted"}],
            ),
        )
    )


def await_approval(context: df.DurableOrchestrationContext, tool: ToolJob) -> Gen:
    """Wait for ``approval:{tool task}`` until the deadline; the decision taken."""
    event = f"approval:{tool.task_id}"
    deadline = context.current_utc_datetime + timedelta(seconds=tool.limits.approval_timeout_s)
    until = deadline.strftime("%Y-%m-%dT%H:%M:%SZ")
    yield context.call_entity(
        tool.entity,
        "commit",
        tool.commit(
            tasks=[{"id": tool.task_id, "status": TaskStatus.WAITING, "phase": "approval"}]
        ),
    )
    issued = (
        (yield from issue_links(context, tool, until)) if tool.job.get("approval_links") else {}
    )
    set_status(
        context,
        "approval",
        tool=tool.name,
        event=event,
        until=until,
        token_hashes=issued.get("hashes"),
        notified=issued.get("notified"),
    )
    decided, raised = yield from event_or_deadline(context, event, deadline)
    if not decided:
        return {"decision": "timeout", "request_id": None}
    payload = event_payload(raised)
    return {"decision": payload.get("decision"), "request_id": payload.get("requestId")}


def issue_links(context: df.DurableOrchestrationContext, tool: ToolJob, until: str) -> Gen:
    """``issue_approval``'s answer; a failed activity only means no links (the admin key
    still decides)."""
    job = {
        "session_id": tool.job["session_id"],
        "tool_task_id": tool.task_id,
        "tool": tool.name,
        "until": until,
    }
    # Published before the mail goes out: a link clicked before the hashes are published
    # is then held by the link route for a moment instead of refused.
    set_status(context, "approval", tool=tool.name, event=f"approval:{tool.task_id}",
               until=until, links="pending")  # fmt: skip
    try:
        issued = yield context.call_activity("issue_approval", job)
    except Exception:  # noqa: BLE001 - no links is a degraded approval, not a failed tool
        return {"notified": False}
    return issued if isinstance(issued, dict) else {"notified": False}


def execute(
    context: df.DurableOrchestrationContext,
    tool: ToolJob,
    checked: dict[str, Any],
    spec: tools.ToolSpec[Any],
    approval: dict[str, Any] | None,
) -> Gen:
    """Run the tool unless its approval was refused; a ``Ran``."""
    if approval is not None and approval["decision"] != "approve":
        why = "timed out" if approval["decision"] == "timeout" else "was rejected"
        message = f"the approval for {tool.name} {why}"
        return Ran({"ok": False, "kind": "rejected", "message": message})
    if tool.name == "send_notices":
        return Ran((yield from send_notices(context, tool, checked)))
    if not tool.job.get("declarations"):  # started before declarations applied: as it ran
        return (yield from execute_tool(context, tool, checked, spec))
    if spec.concurrency is None:
        return (yield from execute_declared(context, tool, checked, spec))
    # A declared limit (docs/loops.md): the slot is held across every try of the tool.
    grant: dict[str, Any] = {}
    ran = yield from declared_limits.limited(
        context,
        kernel_limits.parse_limit(spec.concurrency),
        {"tool": tool.name, "session": tool.job["session_id"], **checked},
        tool.task_id,
        lambda: execute_declared(context, tool, checked, spec),
        grant,
    )
    ran = ran if isinstance(ran, Ran) else Ran(ran)  # a superseded (debounced) call
    ran.limit = grant
    return ran


def execute_declared(
    context: df.DurableOrchestrationContext,
    tool: ToolJob,
    checked: dict[str, Any],
    spec: tools.ToolSpec[Any],
) -> Gen:
    """The tool under its failure policy, if it declares one: a ``tool_error`` is tried again
    (attempt records ``...:2``, ``...:3``), then the handler runs once; the ``Ran`` says the
    tier, and the task record shows each step (``retry n`` / ``on_failure``)."""
    policy = spec.failure
    if policy is None:
        return (yield from execute_tool(context, tool, checked, spec))

    def attempt(number: int) -> Gen:
        ran = yield from execute_tool(context, tool, checked, spec, number)
        if ran.result.get("kind") in RETRYABLE_KINDS:
            raise TryFailed(str(ran.result.get("message") or "tool_error"), ran)
        return ran

    def progress(tier: str, facts: dict[str, Any]) -> Gen:
        phase = "on_failure" if facts.get("handler") else f"retry {facts['attempt'] + 1}"
        task = {"id": tool.task_id, "status": TaskStatus.RUNNING, "phase": phase, "tier": tier}
        yield context.call_entity(
            tool.entity,
            "commit",
            tool.commit(tasks=[{**task, "reason": str(facts["failure"])[:1000]}]),
        )

    original = {
        "tool": tool.name,
        "arguments": checked,
        "session_id": tool.job["session_id"],
        "submission_id": tool.submission_id,
        "tool_call_id": tool.call["id"],
    }
    outcome = yield from run_kind(
        context, policy, tool.task_id, original, attempt, publish=False, progress=progress
    )
    if outcome["ok"]:
        ran = outcome["result"]
    else:
        ran = outcome.get("last") or Ran({"ok": False, "kind": "tool_error", "message": ""})
        told = {"handled": "the operator was notified"}.get(
            outcome["tier"], "nobody could be notified, it needs attention"
        )
        message = f"{outcome['failure']} (tried {outcome['attempts']} times; {told})"
        ran.result = {**ran.result, "message": message[:1000]}
    ran.tier = outcome["tier"]
    return ran


def send_notices(context: df.DurableOrchestrationContext, tool: ToolJob, checked: Any) -> Gen:
    """The ``send_notices`` workflow as a sub-orchestration; its result for the model."""
    try:
        result = yield context.call_sub_orchestrator(
            "send_notices",
            {
                "session_id": tool.job["session_id"],
                "submission_id": tool.submission_id,
                "tool_task_id": tool.task_id,
                **checked,
            },
            ids.child_task_id(tool.task_id, "notices"),
            version=child_version(context),
        )
    except Exception as exc:  # noqa: BLE001 - an unavailable workflow is a tool error
        result = {"ok": False, "kind": "tool_error", "message": f"send_notices failed: {exc}"}
    if not isinstance(result, dict):
        return {"ok": False, "kind": "tool_error", "message": "send_notices gave no result"}
    if not result.get("ok") and not result.get("message"):  # the model reads "message"
        error = result.get("error") or {}
        detail = error.get("message") if isinstance(error, dict) else error
        result = {**result, "message": str(detail or result.get("summary") or "")[:500]}
    return result


def execute_tool(
    context: df.DurableOrchestrationContext,
    tool: ToolJob,
    checked: dict[str, Any],
    spec: tools.ToolSpec[Any],
    attempt: int = 1,
) -> Gen:
    """The ``execute_tool`` activity under the attempt record of try ``attempt``; sleeps
    while another execution holds it."""
    job, limits = tool.job, tool.limits
    ran: dict[str, Any] = {"status": "leased"}
    for wait_no in range(1, MAX_LEASE_WAITS + 1):
        try:
            ran = yield context.call_activity(
                "execute_tool",
                {
                    "key": f"{job['nonce']}:{tool.submission_id}:{job['round']}:{job['index']}"
                    f":{attempt}",
                    "tool_task_id": tool.task_id,
                    "name": tool.name,
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
        set_status(context, "execute", tool=tool.name, waiting_for_lease=wait_no)
        wake = context.current_utc_datetime + timedelta(
            seconds=min(float(ran["retry_after"]), limits.tool_lease_s) + 0.05
        )
        yield context.create_timer(wake)
    result = ran.get("result") or {
        "ok": False,
        "kind": "interrupted",
        "message": f"{tool.name} is still held by another execution; its outcome is unknown",
    }
    return Ran(result, ran.get("documents") or [], ran.get("result_ref"), ran.get("runs"))


def record_outcome(context: df.DurableOrchestrationContext, tool: ToolJob, ran: Ran) -> Gen:
    """Fact 2, tool completed, with the document changes it asked for; the result to apply."""
    result, documents = ran.result, ran.documents
    outcome_entry: dict[str, Any] = {
        "role": "tool",
        "kind": "tool_outcome",
        "data": {
            "tool_task_id": tool.task_id,
            "tool_call_id": tool.call["id"],
            "name": tool.name,
            "ok": bool(result.get("ok")),
            "kind": result.get("kind"),
            "runs": ran.runs,
        },
    }
    completing = {"id": tool.task_id, "status": TaskStatus.COMPLETING, "phase": "completed"}
    completed = yield context.call_entity(
        tool.entity,
        "commit",
        tool.commit(entries=[outcome_entry], documents=documents, tasks=[completing]),
    )
    if not completed["ok"] and documents:  # the change was refused: the tool failed
        result = {
            "ok": False,
            "kind": (completed["error"] or {}).get("error", "commit_failed"),
            "message": error_text(completed),
        }
        outcome_entry["data"].update(ok=False, kind=result["kind"])
        yield context.call_entity(
            tool.entity, "commit", tool.commit(entries=[outcome_entry], tasks=[completing])
        )
    elif completed["ok"] and documents:
        result = {**result, "versions": completed["result"]["document_versions"]}
    return result


def apply_result(
    context: df.DurableOrchestrationContext,
    tool: ToolJob,
    result: dict[str, Any],
    ran: Ran,
    approval: dict[str, Any] | None,
) -> Gen:
    """Fact 3, result applied: the tool message the model reads, the task final (with its
    tier, under a failure policy)."""
    status = _final_status(result)
    set_status(
        context,
        "applied",
        tool=tool.name,
        ok=bool(result.get("ok")),
        approval=approval,
        tier=ran.tier,
        limit=ran.limit,
    )
    reason = (
        {}
        if result.get("ok")
        else {"reason": f"{result.get('kind')}: {result.get('message')}"[:1000]}
    )
    tier = {"tier": ran.tier} if ran.tier else {}
    yield context.call_entity(
        tool.entity,
        "commit",
        tool.commit(
            entries=[result_entry(tool.task_id, tool.call, result, ran.result_ref)],
            tasks=[{"id": tool.task_id, "status": status, "phase": "applied", **reason, **tier}],
        ),
    )
    return envelope(tool.call, result, status)
