"""``mcp_tool_task``: one call of an MCP server's tool as its own orchestration.

``agent_round`` starts it instead of ``tool_task`` for a call named ``mcp__<server>__<tool>``,
with the same input and id (``kernel.common.ids.tool_task_id``) plus ``mcp: {"ref"}``, the
turn's catalogue (``activities/mcp.py``). It keeps the tool task's three facts and envelope
(``orchestrators/tool_task.py``; docs/turn.md) and adds what MCP needs:

1. call: the ``check_mcp_call`` activity finds the tool in the turn's catalogue and checks the
   arguments against its input schema; a refused call is answered at once (nothing is sent).
   It also says the replay policy: the server's annotations (``readOnlyHint`` or
   ``idempotentHint`` -> ``safe``, else ``unsafe``) under the configuration's ``replay``.
2. **call accepted**: the intent (entry ``tool_intent`` with ``server``, ``tool``, ``policy``).
3. execute: the ``execute_tool`` activity under the attempt record ``...:{attempt}``, so a
   crash is judged by the ledger as for every tool: a ``safe`` call runs again, an ``unsafe``
   one is ``interrupted`` and never sent again on its own. A ``safe`` call whose server was
   down, too slow or lost (``mcp_unavailable``, ``mcp_timeout``, ``mcp_lost``) is tried again
   after a durable timer (1 s, 2 s, 4 s ... at most 30 s), up to the server's ``maxAttempts``;
   an unsafe one never is. With the server's ``onInterrupted: "attention"`` an interrupted call
   parks the task (``needs_attention``, custom status naming the server, the tool and the
   arguments, event ``operator:{task}:{n}``): the operator's ``retry`` sends it once more under
   the next attempt record, ``abort`` (or nobody within ``AGENT_ATTENTION_TIMEOUT_S``) ends it
   as ``interrupted``.
   A call the server runs as an MCP task (``adapters/mcp_tasks.py``) answers with the task's
   handle, which the ledger holds as the attempt's outcome: from then on the call is never
   sent again. The task is polled (``poll_mcp_task``) on durable timers, at the server's
   ``pollIntervalMs`` (within ``MIN_POLL_S``..``MAX_POLL_S``; a poll that cannot reach the
   server backs off, doubling), until it ends - its result is the call's. It is cancelled
   (``cancel_mcp_task``) when the server's ``taskTimeoutS`` from its start has passed
   (``mcp_task_timeout``, not tried again: it had all that time), when it asks for input (the
   kernel has no one to ask: ``mcp_input_required``), and when the submission was cancelled
   meanwhile (seen at the next poll: ``cancelled``). A task the server no longer knows is
   ``mcp_task_lost``; for a safe tool that is tried again like a lost connection.
4. **tool completed** and 5. **result applied**: as ``tool_task``.
"""

from __future__ import annotations

import json
from collections.abc import Generator
from datetime import timedelta
from typing import Any

import azure.durable_functions as df

from kernel.common import content
from kernel.common.statuses import TaskStatus
from kernel.turn.mcp_config import DEFAULT_TASK_TIMEOUT_S
from orchestrators.steps import error_text, event_or_deadline, event_payload, set_status
from orchestrators.tool_task import (
    INLINE_ARGUMENTS_BYTES,
    Ran,
    ToolJob,
    apply_result,
    envelope,
    record_outcome,
    reject_call,
)

bp = df.Blueprint()
Gen = Generator[Any, Any, Any]
RETRY_KINDS = frozenset({"mcp_unavailable", "mcp_timeout", "mcp_lost", "mcp_task_lost"})
FIRST_RETRY_S = 1.0
MAX_RETRY_S = 30.0
MAX_LEASE_WAITS = 30
MAX_PARKS = 10
MIN_POLL_S = 0.5
MAX_POLL_S = 60.0
MAX_TASK_POLLS = 5000  # bounds the loop whatever the settings; the deadline ends it first


@bp.orchestration_trigger(context_name="context")
def mcp_tool_task(context: df.DurableOrchestrationContext) -> Generator[Any, Any, dict[str, Any]]:
    tool = ToolJob.of(context.instance_id, context.get_input())
    set_status(context, "call", tool=tool.name)
    checked = yield context.call_activity(
        "check_mcp_call",
        {
            "mcp": tool.job.get("mcp") or {},
            "name": tool.name,
            "arguments": tool.call.get("arguments"),
            "allowed": tool.allowed,
        },
    )
    if not checked["ok"]:
        return (yield from reject_call(context, tool, checked["error"]))
    accepted = yield context.call_entity(
        tool.entity,
        "commit",
        tool.commit(
            entries=[intent(tool, checked)],
            tasks=[{"id": tool.task_id, "status": TaskStatus.RUNNING, "phase": "accepted"}],
        ),
    )
    if not accepted["ok"]:
        failure = {"ok": False, "kind": "commit_failed", "message": error_text(accepted)}
        return envelope(tool.call, failure, TaskStatus.FAILED)
    set_status(context, "execute", tool=tool.name, policy=checked["policy"])
    ran = yield from execute(context, tool, checked)
    result = yield from record_outcome(context, tool, ran)
    return (yield from apply_result(context, tool, result, ran, None))


def intent(tool: ToolJob, checked: dict[str, Any]) -> dict[str, Any]:
    """Fact 1's entry: the final arguments, the server and tool, the replay policy."""
    data: dict[str, Any] = {
        "tool_task_id": tool.task_id,
        "tool_call_id": tool.call["id"],
        "name": tool.name,
        "server": checked["server"],
        "tool": checked["tool"],
        "policy": checked["policy"],
        "requires_approval": False,
    }
    encoded = json.dumps(checked["arguments"], sort_keys=True, ensure_ascii=False)
    if len(encoded.encode()) <= INLINE_ARGUMENTS_BYTES:
        data["arguments"] = checked["arguments"]
    else:
        data["arguments_digest"] = content.content_ref(encoded)
    return {"role": "tool", "kind": "tool_intent", "data": data}


def execute(context: df.DurableOrchestrationContext, tool: ToolJob, checked: dict[str, Any]) -> Gen:
    """Attempts under their records: retried when safe and the server failed, parked when an
    interrupted call asks for a person. A ``Ran``."""
    attempt, parks = 1, 0
    while True:
        ran = yield from run_attempt(context, tool, checked, attempt)
        handle = ran.result.get("mcp_task") if ran.result.get("ok") else None
        if isinstance(handle, dict):
            ran = yield from follow(context, tool, checked, handle, ran)
        kind = ran.result.get("kind")
        if kind == "interrupted" and checked["on_interrupted"] == "attention" and parks < MAX_PARKS:
            parks += 1
            decision = yield from park(context, tool, checked, parks)
            if decision.get("action") == "retry":
                attempt += 1
                continue
            why = {"abort": "aborted by the operator"}.get(
                str(decision.get("action")), "nobody attended to it in time"
            )
            message = f"{ran.result.get('message')} It was parked for a person and {why}."
            ran.result = {**ran.result, "message": message[:1000]}
            return ran
        retry = (
            checked["policy"] == "safe"
            and kind in RETRY_KINDS
            and attempt < int(checked.get("max_attempts") or 1)
        )
        if not retry:
            return ran
        delay = min(MAX_RETRY_S, FIRST_RETRY_S * 2.0 ** (attempt - 1))
        reason = f"{kind}: {ran.result.get('message')}"
        yield phase(context, tool, TaskStatus.RUNNING, f"retry {attempt + 1}", reason)
        set_status(context, "execute", tool=tool.name, retry=attempt + 1, after_s=delay)
        yield context.create_timer(context.current_utc_datetime + timedelta(seconds=delay))
        attempt += 1


def run_attempt(
    context: df.DurableOrchestrationContext, tool: ToolJob, checked: dict[str, Any], attempt: int
) -> Gen:
    """``execute_tool`` under the record of ``attempt``; sleeps while another execution holds
    it."""
    job, limits = tool.job, tool.limits
    ran: dict[str, Any] = {"status": "leased"}
    for _ in range(MAX_LEASE_WAITS):
        try:
            ran = yield context.call_activity(
                "execute_tool",
                {
                    "key": f"{job['nonce']}:{tool.submission_id}:{job['round']}:{job['index']}"
                    f":{attempt}",
                    "tool_task_id": tool.task_id,
                    "name": tool.name,
                    "arguments": checked["arguments"],
                    "policy": checked["policy"],
                    "session_id": job["session_id"],
                    "timeout_s": limits.tool_timeout_s,
                    "lease_s": limits.tool_lease_s,
                    "mcp": job.get("mcp") or {},
                },
            )
        except Exception as exc:  # noqa: BLE001 - the model sees a failed tool, the turn goes on
            result = {"ok": False, "kind": "tool_error", "message": str(exc)[:500]}
            ran = {"status": "done", "result": result}
        if ran["status"] != "leased":
            break
        wake = context.current_utc_datetime + timedelta(
            seconds=min(float(ran["retry_after"]), limits.tool_lease_s) + 0.05
        )
        yield context.create_timer(wake)
    result = ran.get("result") or {
        "ok": False,
        "kind": "interrupted",
        "message": f"{tool.name} is still held by another execution; its outcome is unknown",
    }
    if result.get("kind") == "timeout":  # the activity's own limit: for MCP, the server's
        result = {**result, "kind": "mcp_timeout"}  # slowness, and the turn goes on
    return Ran(result, [], ran.get("result_ref"), ran.get("runs"))


def park(
    context: df.DurableOrchestrationContext, tool: ToolJob, checked: dict[str, Any], n: int
) -> Gen:
    """``needs_attention`` until the operator's ``retry`` or ``abort`` (or the deadline)."""
    event = f"operator:{tool.task_id}:{n}"
    deadline = context.current_utc_datetime + timedelta(seconds=tool.limits.attention_timeout_s)
    arguments = json.dumps(checked["arguments"], sort_keys=True, ensure_ascii=False)
    reason = (
        f"interrupted: {checked['tool']} of the MCP server {checked['server']} with "
        f"{arguments[:300]} may or may not have run; retry sends it again, abort ends it"
    )
    yield phase(context, tool, TaskStatus.NEEDS_ATTENTION, "interrupted", reason)
    set_status(
        context,
        "needs_attention",
        tool=tool.name,
        server=checked["server"],
        mcp_tool=checked["tool"],
        arguments=arguments[:300],
        event=event,
        until=deadline.strftime("%Y-%m-%dT%H:%M:%SZ"),
    )
    decided, raised = yield from event_or_deadline(context, event, deadline)
    decision = event_payload(raised) if decided else {"action": "timeout"}
    operator = {"request_id": decision.get("requestId"), "action": decision.get("action")}
    set_status(context, "execute", tool=tool.name, operator=operator)
    yield phase(context, tool, TaskStatus.RUNNING, "execute")
    return decision


def phase(
    context: df.DurableOrchestrationContext,
    tool: ToolJob,
    status: TaskStatus,
    name: str,
    reason: str | None = None,
) -> Any:
    """The session entity's commit of the tool task's status and phase (a task to yield)."""
    task: dict[str, Any] = {"id": tool.task_id, "status": status, "phase": name}
    if reason is not None:
        task["reason"] = reason[:1000]
    return context.call_entity(tool.entity, "commit", tool.commit(tasks=[task]))


def poll_delay(interval_ms: object, failures: int) -> float:
    """Seconds to the next poll: the server's interval within bounds, or back-off after
    ``failures`` polls in a row that could not reach it."""
    if failures:
        return min(MAX_POLL_S, 2.0**failures)
    if isinstance(interval_ms, int | float) and not isinstance(interval_ms, bool):
        return min(MAX_POLL_S, max(MIN_POLL_S, float(interval_ms) / 1000.0))
    return 1.0


def follow(
    context: df.DurableOrchestrationContext,
    tool: ToolJob,
    checked: dict[str, Any],
    handle: dict[str, Any],
    ran: Ran,
) -> Gen:
    """Poll the server's task until it ends, asks for input, or its time is up. A ``Ran``."""
    task_id = str(handle["taskId"])
    reason = f"{checked['server']} runs {checked['tool']} as its task {task_id}"
    yield phase(context, tool, TaskStatus.RUNNING, "mcp_task", reason)
    timeout_s = float(checked.get("task_timeout_s") or DEFAULT_TASK_TIMEOUT_S)
    deadline = context.current_utc_datetime + timedelta(seconds=timeout_s)
    job = {
        "mcp": tool.job.get("mcp") or {},
        "name": tool.name,
        "task_id": task_id,
        "session_id": tool.job["session_id"],
        "submission_id": tool.submission_id,
        "tool_task_id": tool.task_id,
        "timeout_s": tool.limits.tool_timeout_s,
    }
    status, interval, failures = str(handle.get("status")), handle.get("pollIntervalMs"), 0
    for polls in range(MAX_TASK_POLLS):
        if context.current_utc_datetime >= deadline:
            break
        set_status(context, "execute", tool=tool.name, mcp_task=task_id, task=status, polls=polls)
        wake = context.current_utc_datetime + timedelta(seconds=poll_delay(interval, failures))
        yield context.create_timer(min(wake, deadline))
        try:
            polled = yield context.call_activity("poll_mcp_task", job)
        except Exception as exc:  # noqa: BLE001 - a failed poll is asked again
            polled = {"status": "unreachable", "kind": "tool_error", "message": str(exc)[:500]}
        if polled["status"] == "done":
            return Ran(polled["result"], [], polled.get("result_ref"), ran.runs)
        if polled["status"] == "cancel_requested":
            yield context.call_activity("cancel_mcp_task", job)
            message = f"{checked['tool']} (task {task_id}) was cancelled: {polled['reason']}"
            return Ran({"ok": False, "kind": "cancelled", "message": message}, [], None, ran.runs)
        if polled["status"] == "input_required":
            yield context.call_activity("cancel_mcp_task", job)
            message = (
                f"{checked['tool']} (task {task_id}) asked for input, which this agent cannot "
                "give; the task was cancelled"
            )
            return Ran(
                {"ok": False, "kind": "mcp_input_required", "message": message}, [], None, ran.runs
            )
        failures = failures + 1 if polled["status"] == "unreachable" else 0
        status, interval = str(polled["status"]), polled.get("pollIntervalMs", interval)
    yield context.call_activity("cancel_mcp_task", job)
    message = (
        f"{checked['tool']} (task {task_id}) did not end within {timeout_s:g} s "
        "(the server's taskTimeoutS); it was cancelled"
    )
    return Ran({"ok": False, "kind": "mcp_task_timeout", "message": message}, [], None, ran.runs)
