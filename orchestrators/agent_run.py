"""``agent_run``: the rounds of one turn, each round its own orchestration (``agent_round``).

``agent_run`` is called by ``agent_turn`` with ``{session_id, submission_id, request_id,
text|text_ref, settings, turn_instance_id, tools?, policy?}`` and returns ``{"status":
completed|failed|cancelled, "answer", "reason"}``. It only sequences rounds, so its history
grows by a few events per round:

    round 1 -> round 2 -> ... -> answer | stop (guard, tool timeout, cancel)
                  \\-> needs_attention -> operator retry (the same round again) | abort | timeout

Each round is the sub-orchestration ``agent_round`` (id ``{run}:round-{n}``, ``.{k}`` for the
k-th operator retry; ``orchestrators/agent_round.py``): prepare -> request (-> retry) -> tools.

A round that cannot go on (a model phase that keeps failing, a commit the session refuses)
returns ``attention``: the run parks as ``needs_attention`` with the facts in its custom status
and the turn task, and waits for ``operator:{run}:{n}`` (a unique name per wait) raced with
``AGENT_ATTENTION_TIMEOUT_S``. ``retry`` runs the round again from the last committed round;
``abort`` and the timeout end the turn as ``failed`` with the recorded reason.

A submission that carries ``policy`` (a loop's run, ``docs/loops.md``) runs under the app's
turn limits with that policy laid over them; one that carries ``tools`` passes them to every
round, whose model call offers only those and whose tool tasks refuse any other
(``tool_not_allowed``).

The phase is mirrored in a small custom status (``{"phase", "round", ...}``, at most 1 KB, never
empty) and in the session's task graph (turn -> round -> model call, tool tasks).
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import azure.durable_functions as df

from kernel.common import ids
from kernel.common.statuses import SubmissionStatus, TaskStatus
from kernel.turn.policy import TurnLimits, TurnSettingsError
from orchestrators.steps import (
    child_version,
    event_or_deadline,
    event_payload,
    session_entity,
    set_status,
    turn_patch,
)

bp = df.Blueprint()
MAX_PARKS = 10

Gen = Generator[Any, Any, Any]


def outcome(status: str, answer: str | None = None, reason: str | None = None) -> dict[str, Any]:
    return {"status": status, "answer": answer, "reason": reason}


@dataclass(slots=True)
class Run:
    """The run's working state across rounds; replay rebuilds it identically from history."""

    entity: df.EntityId
    turn_id: str
    base: dict[str, Any]  # the part of every round's input that all rounds share
    limits: TurnLimits
    tokens: int = 0
    round_no: int = 1
    attempt: int = 1
    parks: int = 0
    operator: dict[str, Any] | None = None

    def commit_turn(self, **patch: Any) -> dict[str, Any]:
        return {"tasks": [turn_patch(self.turn_id, **patch)]}


@bp.orchestration_trigger(context_name="context")
def agent_run(context: df.DurableOrchestrationContext) -> Generator[Any, Any, dict[str, Any]]:
    job: dict[str, Any] = context.get_input()
    entity = session_entity(job["session_id"])
    turn_id = job["turn_instance_id"]
    set_status(context, "prepare")
    read = yield from read_limits(context, job, turn_id)
    if not read["ok"]:
        reason = f"invalid_settings: {read['message']}"
        set_status(context, "failed", reason=reason)
        yield context.call_entity(entity, "commit", {"tasks": [turn_patch(turn_id, reason=reason)]})
        return outcome(SubmissionStatus.FAILED, reason=reason)
    base = {
        "session_id": job["session_id"],
        "submission_id": job["submission_id"],
        "turn_id": turn_id,
        "run_id": context.instance_id,
        # Keys this run's ledger records: stable across replays, new for every run.
        "nonce": str(context.new_uuid()),
        "limits": read["limits"],
        # A run with declared tools (a loop's) offers and allows only those; absent: all.
        **({"tools": list(job["tools"])} if job.get("tools") else {}),
    }
    run = Run(entity, turn_id, base, TurnLimits.from_dict(read["limits"]))
    # The environment the turn started in; None for a run whose limits were given or were read
    # before environments were recorded - it replays, and runs, unchecked.
    recorded = read.get("environment")
    catalogue: dict[str, Any] = {}
    if read.get("mcp"):  # MCP servers are configured: their tools, listed once (docs/tools.md)
        catalogue = yield context.call_activity("list_mcp_tools", {"turn": turn_id})
        if not catalogue["ok"]:
            reason = f"invalid_settings: {catalogue['message']}"[:1000]
            set_status(context, "failed", reason=reason)
            yield context.call_entity(entity, "commit", run.commit_turn(reason=reason))
            return outcome(SubmissionStatus.FAILED, reason=reason)
        base["mcp"] = {"ref": catalogue["ref"]}
        if recorded is not None:
            recorded = {**recorded, "mcp": catalogue["servers"]}
    if recorded is not None:
        yield from record_environment(
            context, run, job["submission_id"], recorded, **mcp_record(catalogue)
        )
    while run.round_no <= run.limits.max_rounds:
        if recorded is not None and (run.round_no > 1 or run.attempt > 1):
            checked = yield from check_environment(context, run, job["submission_id"], recorded)
            if not checked["ok"]:
                return (yield from give_up(context, run, checked["decision"], checked["reason"]))
            recorded = checked["recorded"]
        result = yield from run_round(context, run)
        if result["kind"] == "continue":
            run.round_no, run.attempt = run.round_no + 1, 1
            continue
        if result["kind"] == "answer":
            set_status(
                context, "answer", round=run.round_no, tokens=run.tokens, operator=run.operator
            )
            return outcome(SubmissionStatus.COMPLETED, answer=result.get("answer"))
        if result["kind"] == "stop":
            return (yield from stop(context, run, result))
        # attention: park until an operator decides, bounded in time and in count
        reason = result.get("reason") or "the round cannot continue"
        decision = yield from park(context, run, reason)
        if decision.get("action") == "retry" and run.parks < MAX_PARKS:
            run.attempt += 1
            continue
        return (yield from give_up(context, run, decision, reason))
    reason = f"max_rounds: no answer after {run.limits.max_rounds} rounds"
    return outcome(SubmissionStatus.FAILED, reason=reason)


def read_limits(context: df.DurableOrchestrationContext, job: dict[str, Any], turn_id: str) -> Gen:
    """``{"ok", "limits"}`` from the caller's settings, else from the ``turn_limits`` activity,
    with the submission's own ``policy`` (a loop's) laid over them."""
    if job.get("settings") is not None:
        try:
            read = {"ok": True, "limits": TurnLimits.from_settings(job["settings"]).to_dict()}
        except TurnSettingsError as exc:
            return {"ok": False, "message": str(exc)}
    else:  # read in an activity: settings (and their secrets) stay out of histories
        read = yield context.call_activity("turn_limits", {"turn": turn_id})
    return with_policy(read, job.get("policy"))


def with_policy(read: dict[str, Any], policy: dict[str, Any] | None) -> dict[str, Any]:
    """The read limits with a run's policy over them; no policy (any submission before loops
    carried one) leaves them as read, so such runs replay unchanged."""
    if not read.get("ok") or not policy:
        return read
    try:
        limits = TurnLimits.from_dict(read["limits"]).with_policy(policy)
    except TurnSettingsError as exc:
        return {"ok": False, "message": f"policy.{exc}"}
    kept: dict[str, Any] = {key: read[key] for key in ("environment", "mcp") if key in read}
    return {"ok": True, "limits": limits.to_dict(), **kept}


def environment_document(submission_id: str, recorded: dict[str, Any], **more: Any) -> Any:
    """The session document that shows a turn's recorded environment (docs/workspace.md)."""
    data = {"recorded": recorded, **more}
    return {"id": f"environment.{submission_id}", "type": "json", "data": data}


def mcp_record(catalogue: dict[str, Any]) -> dict[str, Any]:
    """What the environment document shows of a turn's MCP catalogue (none: nothing)."""
    if not catalogue:
        return {}
    return {"mcp": {k: catalogue[k] for k in ("ref", "tools", "problems")}}


def record_environment(
    context: df.DurableOrchestrationContext,
    run: Run,
    submission_id: str,
    recorded: Any,
    **more: Any,
) -> Gen:
    document = environment_document(submission_id, recorded, **more)
    yield context.call_entity(run.entity, "commit", {"documents": [document]})


def check_environment(
    context: df.DurableOrchestrationContext, run: Run, submission_id: str, recorded: Any
) -> Gen:
    """Compare this host's environment with the recorded one under the host's policy; a
    refused change parks the run (``needs_attention``, the reason naming what changed) until an
    operator lets it continue (``retry``: the new environment becomes the recorded one) or
    cancels it (``abort``, or nobody in time). ``{"ok", "recorded"}`` or ``{"ok": false,
    "decision", "reason"}``."""
    checked = yield context.call_activity("check_environment", {"recorded": recorded})
    if checked.get("ok"):
        return {"ok": True, "recorded": recorded}
    reason = str(checked.get("reason"))
    decision = yield from park(context, run, reason)
    if decision.get("action") != "retry" or run.parks >= MAX_PARKS:
        return {"ok": False, "decision": decision, "reason": reason}
    current = checked.get("current") or recorded
    allowed = {"allowed_by": decision.get("requestId"), "previous": recorded}
    yield context.call_entity(
        run.entity,
        "commit",
        {
            "documents": [environment_document(submission_id, current, **allowed)],
            "tasks": [turn_patch(run.turn_id, status=TaskStatus.RUNNING, phase="run")],
        },
    )
    return {"ok": True, "recorded": current}


def run_round(context: df.DurableOrchestrationContext, run: Run) -> Gen:
    """One ``agent_round`` (a failed one is a fact to act on); the run's tokens follow it."""
    set_status(context, "round", round=run.round_no, attempt=run.attempt, operator=run.operator)
    key = f"round-{run.round_no}" if run.attempt == 1 else f"round-{run.round_no}.{run.attempt}"
    try:
        result = yield context.call_sub_orchestrator(
            "agent_round",
            {**run.base, "round": run.round_no, "attempt": run.attempt, "tokens_used": run.tokens},
            ids.child_task_id(context.instance_id, key),
            version=child_version(context),
        )
    except Exception as exc:  # noqa: BLE001 - a failed round is a fact to act on
        result = {
            "kind": "attention",
            "reason": f"round_failed: {exc}"[:500],
            "tokens_used": run.tokens,
        }
    run.tokens = int(result.get("tokens_used", run.tokens))
    return result


def stop(context: df.DurableOrchestrationContext, run: Run, result: dict[str, Any]) -> Gen:
    """A round stopped the turn (guard, tool timeout, cancel): record why on the turn task."""
    set_status(
        context, "stopped", round=run.round_no, reason=result["reason"], operator=run.operator
    )
    yield context.call_entity(
        run.entity, "commit", run.commit_turn(phase="stopped", reason=result["reason"])
    )
    return outcome(result["status"], reason=result["reason"])


def park(context: df.DurableOrchestrationContext, run: Run, reason: str) -> Gen:
    """Record ``needs_attention`` and wait for ``operator:{run}:{n}``; the decision."""
    run.parks += 1
    event = f"operator:{context.instance_id}:{run.parks}"
    deadline = context.current_utc_datetime + timedelta(seconds=run.limits.attention_timeout_s)
    yield context.call_entity(
        run.entity,
        "commit",
        run.commit_turn(
            status=TaskStatus.NEEDS_ATTENTION, phase=f"round {run.round_no}", reason=reason
        ),
    )
    set_status(
        context,
        "needs_attention",
        round=run.round_no,
        reason=reason,
        event=event,
        until=deadline.strftime("%Y-%m-%dT%H:%M:%SZ"),
        operator=run.operator,
    )
    decided, payload = yield from event_or_deadline(context, event, deadline)
    decision = event_payload(payload) if decided else {"action": "timeout"}
    run.operator = {"request_id": decision.get("requestId"), "action": decision.get("action")}
    return decision


def give_up(
    context: df.DurableOrchestrationContext, run: Run, decision: dict[str, Any], reason: str
) -> Gen:
    """End a parked turn as ``failed``: aborted, too many retries, or nobody came in time."""
    final = {"abort": "aborted by the operator", "retry": "too many operator retries"}.get(
        str(decision.get("action")), "nobody attended to it in time"
    )
    reason = f"needs_attention, {final}: {reason}"[:1000]
    set_status(context, "stopped", round=run.round_no, reason=reason, operator=run.operator)
    yield context.call_entity(
        run.entity,
        "commit",
        run.commit_turn(status=TaskStatus.RUNNING, phase="stopped", reason=reason),
    )
    return outcome(SubmissionStatus.FAILED, reason=reason)
