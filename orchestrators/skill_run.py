"""``skill_run``: the one orchestrator that executes any skill (``docs/skills.md``).

Started by ``api/skills.py`` under ``skill:{name}:run:{run id}`` with ``{"skill", "version",
"definition", "input", "run_id", "settings": {"lease_s", "tool_timeout_s",
"model_timeout_s"}}``. The definition is the stored version itself, pinned in the input: a
version registered later changes nothing for a run that has started, and a replay reads
exactly what the first execution read. A join child runs as a sub-orchestration of this same
function under ``{run}:{step id}`` with ``"branch": step id``, the outputs it may refer to
(``scope``) and the run's ``nonce``.

The steps run in order; a step that fails ends the run as ``failed`` (a join's children end
the join as its mode says). Per kind:

* ``tool``: arguments resolved from the scope, then ``kernel.turn.tools.validate_call``; each try
  is the ``execute_tool`` activity under its own attempt record
  ``{nonce}:skill:{instance}:{step}:{try}``, so a try whose result was recorded is never run
  again after a crash, and a try that died mid-run is re-run only when the tool and the step's
  ``replay`` policy are both ``safe`` (else ``interrupted``). While another execution holds a
  record's lease the run sleeps on a durable timer and asks again. A failed try is retried
  after a durable timer as the step's ``retry`` says (never after ``interrupted``). A tool
  with a declared limit (``concurrency``: ``append_ledger``) takes its slot for each try.
* ``model``: ``skill_model_call`` under ``{nonce}:skill:{instance}:{step}:model:{try}``;
  ``rate_limited`` / ``transient`` / ``timeout`` are retried as the step's ``retry`` says.
* ``event``: wait for the event named by the step, raced with its timeout (``timeout``).
* ``approval``: wait for ``approval:{step}``; only ``approve`` passes (else ``rejected``).
* ``timer``: a durable timer.
* ``join``: one sub-orchestration per child, joined with a progressive ``task_any`` loop;
  ``failFast`` ends at the first failure and terminates the children still running.
* ``sequence``: its children in order, in the same instance (a join child that is a
  sequence is one branch running several steps).

A cancelled run (terminated by the cancel route) cannot release the slot of a declared limit
it held; the route starts this function once more as ``{run}:release`` with ``{"release":
[{"key", "holder"}]}`` (``kernel.skills.skill.limit_holders``), which releases them and ends.

Returns ``{"ok", "status": "completed"|"failed", "skill", "version", "steps": {id: result},
"outputs": {id: output}, "failed_step"}`` (a branch: ``{"result", "steps", "outputs"}``).
A step result is ``{"ok", "kind", "message", "attempts", "runs"}``, fields that apply.
Custom status: ``{"phase": "running"|"waiting"|"approval"|"retry"|"completed"|"failed",
"skill", "version", "step", "event", "until", "done", "decided": {step: request id}}``.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import azure.durable_functions as df

from kernel.common import limits as kernel_limits
from kernel.skills import skill as skills
from kernel.turn import tools
from orchestrators import limits as declared_limits
from orchestrators.steps import child_version, event_or_deadline, event_payload, set_status

bp = df.Blueprint()
Gen = Generator[Any, Any, Any]
MAX_LEASE_WAITS = 30


@dataclass(slots=True)
class Run:
    """One execution of a skill (or of one branch of it) and what it has produced so far."""

    context: df.DurableOrchestrationContext
    job: dict[str, Any]
    skill: skills.Skill
    nonce: str
    scope: dict[str, Any]
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Approval steps decided in this instance: step id -> the deciding request id, published
    # with every status so the approvals route can tell a repeated request from a late one.
    decided: dict[str, str] = field(default_factory=dict)

    @property
    def instance_id(self) -> str:
        return str(self.context.instance_id)

    @property
    def settings(self) -> dict[str, Any]:
        return dict(self.job.get("settings") or {})

    def status(self, phase: str, step: str | None = None, **extra: Any) -> None:
        set_status(
            self.context,
            phase,
            skill=self.skill.name,
            version=self.job.get("version"),
            step=step,
            done=len(self.results),
            decided=self.decided or None,
            **extra,
        )

    def record(self, step_id: str, result: dict[str, Any]) -> dict[str, Any]:
        self.results[step_id] = {k: v for k, v in result.items() if k != "output"}
        if result.get("ok") and "output" in result:
            self.scope["steps"][step_id] = result["output"]
        return result


def failed(kind: str, message: str, **extra: Any) -> dict[str, Any]:
    return {"ok": False, "kind": kind, "message": message[:500], **extra}


@bp.orchestration_trigger(context_name="context")
def skill_run(context: df.DurableOrchestrationContext) -> Generator[Any, Any, dict[str, Any]]:
    job = context.get_input()
    if "release" in job:  # what a cancelled run held: started by the cancel route
        return (yield from release_slots(context, job["release"]))
    skill = skills.Skill.model_validate(job["definition"])
    branch = job.get("branch")
    scope = job.get("scope") or {"input": job.get("input") or {}, "steps": {}}
    nonce = job.get("nonce") or str(context.new_uuid())[:8]
    run = Run(context, job, skill, nonce, {"input": scope["input"], "steps": dict(scope["steps"])})
    if branch is not None:
        result = yield from run_step(run, skills.find_step(skill, branch))
        # Only what the branch produced: the parent has the outputs it passed in.
        made = {k: v for k, v in run.scope["steps"].items() if k in run.results}
        return {"result": result, "steps": run.results, "outputs": made}
    for step in skill.steps:
        result = yield from run_step(run, step)
        if not result["ok"]:
            run.status("failed", step.id, kind=result.get("kind"))
            return summary(run, False, step.id)
    run.status("completed")
    return summary(run, True, None)


def release_slots(context: df.DurableOrchestrationContext, held: list[dict[str, str]]) -> Gen:
    """Release every slot a cancelled run held or waited for, waking the next in line."""
    for slot in held:
        yield from declared_limits.release(context, slot["key"], slot["holder"])
    return {"ok": True, "released": len(held)}


def summary(run: Run, ok: bool, failed_step: str | None) -> dict[str, Any]:
    return {
        "ok": ok,
        "status": "completed" if ok else "failed",
        "skill": run.skill.name,
        "version": run.job.get("version"),
        "steps": run.results,
        "outputs": run.scope["steps"],
        "failed_step": failed_step,
    }


def run_step(run: Run, step: Any) -> Gen:
    """Run one step and record its result (and its output, when it succeeded)."""
    run.status("running", step.id)
    if isinstance(step, skills.ToolStep):
        result = yield from tool_step(run, step)
    elif isinstance(step, skills.ModelStep):
        result = yield from model_step(run, step)
    elif isinstance(step, skills.EventStep):
        result = yield from wait_step(run, step, step.event, "waiting")
    elif isinstance(step, skills.ApprovalStep):
        result = yield from wait_step(run, step, f"approval:{step.id}", "approval")
    elif isinstance(step, skills.TimerStep):
        result = yield from timer_step(run, step)
    elif isinstance(step, skills.SequenceStep):
        result = yield from sequence_step(run, step)
    else:
        result = yield from join_step(run, step)
    return run.record(step.id, result)


def resolved(run: Run, value: Any) -> tuple[bool, Any]:
    try:
        return True, skills.resolve(value, run.scope)
    except skills.ReferenceUnresolved as exc:
        return False, failed("unresolved_reference", str(exc))


def backoff(run: Run, step: Any, attempt: int, result: dict[str, Any]) -> Gen:
    """Sleep before the next try; False when the step's retry policy allows none."""
    delay = skills.retry_delay(step.retry, attempt)
    if delay is None:
        return False
    run.status("retry", step.id, attempt=attempt, kind=result.get("kind"))
    yield run.context.create_timer(run.context.current_utc_datetime + timedelta(seconds=delay))
    return True


def tool_step(run: Run, step: skills.ToolStep) -> Gen:
    ok, arguments = resolved(run, step.arguments)
    if not ok:
        return arguments
    valid, checked = tools.validate_call(step.tool, arguments)
    if not valid:
        return failed("invalid_arguments", str(checked["message"]), problems=checked["problems"])
    spec = tools.TOOLS[step.tool]
    policy = step.replay or spec.policy
    attempt = 0
    while True:
        attempt += 1
        ran = yield from limited_try(run, step, spec, checked, policy, attempt)
        result = ran.get("result") or failed("tool_error", "the tool gave no result")
        if result.get("ok"):
            done = {"ok": True, "output": result, "attempts": attempt, "runs": ran.get("runs")}
            # A result read back from the attempt record (the try ran before a crash).
            return {**done, "reused": True} if ran.get("reused") else done
        if not skills.tool_retryable(result) or not (
            yield from backoff(run, step, attempt, result)
        ):
            return failed(
                str(result.get("kind") or "tool_error"),
                str(result.get("message") or ""),
                attempts=attempt,
                runs=ran.get("runs"),
            )


def limited_try(
    run: Run,
    step: skills.ToolStep,
    spec: tools.ToolSpec[Any],
    arguments: dict[str, Any],
    policy: str,
    attempt: int,
) -> Gen:
    """One try, under the tool's declared limit when it has one (``docs/loops.md``): a skill
    step appends to the tool ledger one at a time with every tool task that does."""
    if spec.concurrency is None:
        return (yield from execute(run, step, arguments, policy, attempt))
    ran = yield from declared_limits.limited(
        run.context,
        kernel_limits.parse_limit(spec.concurrency),
        {"tool": step.tool, "session": "", **arguments},
        f"{run.instance_id}:{step.id}:{attempt}",
        lambda: execute(run, step, arguments, policy, attempt),
    )
    return ran if "status" in ran else {"status": "done", "result": ran}  # superseded


def execute(run: Run, step: skills.ToolStep, arguments: Any, policy: str, attempt: int) -> Gen:
    """One try under its attempt record; sleeps while another execution holds the record."""
    lease_s = float(run.settings.get("lease_s") or 30)
    ran: dict[str, Any] = {"status": "leased"}
    for wait_no in range(1, MAX_LEASE_WAITS + 1):
        try:
            ran = yield run.context.call_activity(
                "execute_tool",
                {
                    "key": f"{run.nonce}:skill:{run.instance_id}:{step.id}:{attempt}",
                    "tool_task_id": f"{run.instance_id}:{step.id}",
                    "name": step.tool,
                    "arguments": arguments,
                    "policy": policy,
                    "session_id": "",  # skill tools need no session (kernel.skills.skill.SKILL_TOOLS)
                    "timeout_s": float(run.settings.get("tool_timeout_s") or 300),
                    "lease_s": lease_s,
                },
            )
        except Exception as exc:  # noqa: BLE001 - a failed activity is a failed try
            return {"status": "done", "result": failed("tool_error", str(exc))}
        if ran["status"] != "leased":
            return ran
        run.status("running", step.id, waiting_for_lease=wait_no)
        wake = run.context.current_utc_datetime + timedelta(
            seconds=min(float(ran["retry_after"]), lease_s) + 0.05
        )
        yield run.context.create_timer(wake)
    message = f"{step.tool} is still held by another execution; its outcome is unknown"
    return {"status": "interrupted", "result": failed("interrupted", message)}


def model_step(run: Run, step: skills.ModelStep) -> Gen:
    ok, prompt = resolved(run, step.prompt)
    if not ok:
        return prompt
    attempt = 0
    while True:
        attempt += 1
        try:
            result = yield run.context.call_activity(
                "skill_model_call",
                {
                    "key": f"{run.nonce}:skill:{run.instance_id}:{step.id}:model:{attempt}",
                    "prompt": prompt if isinstance(prompt, str) else str(prompt),
                    "timeout_s": float(run.settings.get("model_timeout_s") or 120),
                },
            )
        except Exception as exc:  # noqa: BLE001 - a failed activity is a failed try
            result = failed("transient", str(exc))
        if result.get("ok"):
            output = {k: result.get(k) for k in ("text", "model", "usage")}
            return {"ok": True, "output": output, "attempts": attempt}
        if not skills.model_retryable(result) or not (
            yield from backoff(run, step, attempt, result)
        ):
            return failed(str(result.get("kind")), str(result.get("message")), attempts=attempt)


def wait_step(run: Run, step: Any, event: str, phase: str) -> Gen:
    """An event or an approval: the event raced with the step's timeout."""
    deadline = run.context.current_utc_datetime + timedelta(seconds=step.timeout_s)
    until = deadline.strftime("%Y-%m-%dT%H:%M:%SZ")
    run.status(phase, step.id, event=event, until=until)
    raised, payload = yield from event_or_deadline(run.context, event, deadline)
    if not raised:
        return failed("timeout", f"{event!r} did not come before {until}")
    value = event_payload(payload)
    if phase != "approval":
        return {"ok": True, "output": value}
    decision = {"decision": value.get("decision"), "request_id": value.get("requestId")}
    run.decided[step.id] = str(decision["request_id"])
    if decision["decision"] != "approve":
        return failed("rejected", f"approval {step.id!r} was {decision['decision']!r}")
    return {"ok": True, "output": decision}


def timer_step(run: Run, step: skills.TimerStep) -> Gen:
    due = run.context.current_utc_datetime + timedelta(seconds=step.seconds)
    run.status("waiting", step.id, until=due.strftime("%Y-%m-%dT%H:%M:%S.%fZ"))
    yield run.context.create_timer(due)
    return {"ok": True, "output": {"fired_at": due.strftime("%Y-%m-%dT%H:%M:%S.%fZ")}}


def sequence_step(run: Run, step: skills.SequenceStep) -> Gen:
    """The children in order, in this instance; the first failure ends the sequence."""
    for child in step.steps:
        result = yield from run_step(run, child)
        if not result["ok"]:
            return failed("step_failed", f"{child.id!r} failed: {result.get('message')}")
    return {"ok": True, "output": {"steps": [child.id for child in step.steps]}}


def join_step(run: Run, step: skills.JoinStep) -> Gen:
    """Each child as its own instance, joined as they end; ``failFast`` stops at a failure."""
    children = {
        child.id: run.context.call_sub_orchestrator(
            "skill_run",
            {**run.job, "branch": child.id, "scope": run.scope, "nonce": run.nonce},
            skills.branch_instance_id(run_instance(run), child.id),
            version=child_version(run.context),
        )
        for child in step.steps
    }
    pending = dict(children)
    settled: dict[str, dict[str, Any]] = {}
    while pending:
        done = yield run.context.task_any(list(pending.values()))
        child_id = next(i for i, task in pending.items() if task is done)
        del pending[child_id]
        branch = done.result if isinstance(done.result, dict) else None
        if branch is None:  # the child failed as an orchestration (terminated, a bug)
            result = failed("branch_failed", str(done.result))
            run.record(child_id, result)
        else:
            result = branch["result"]
            run.results.update(branch["steps"])
            run.scope["steps"].update(branch["outputs"])
        settled[child_id] = {"ok": bool(result.get("ok")), "kind": result.get("kind")}
        if step.mode == "failFast" and not result.get("ok"):
            yield from stop_children(run, list(pending))
            return failed(
                "join_failed", f"{child_id!r} failed: {result.get('message')}", settled=settled
            )
    return {"ok": True, "output": {"mode": step.mode, "settled": settled}}


def run_instance(run: Run) -> str:
    """The run's own instance id (a branch's id is ``{run}:{step}``)."""
    branch = run.job.get("branch")
    return run.instance_id.removesuffix(f":{branch}") if branch else run.instance_id


def stop_children(run: Run, child_ids: list[str]) -> Gen:
    if not child_ids:
        return None
    ids_ = [skills.branch_instance_id(run_instance(run), c) for c in child_ids]
    try:
        yield run.context.call_activity(
            "terminate_stragglers", {"instance_ids": ids_, "reason": "failFast: a sibling failed"}
        )
    except Exception:  # noqa: BLE001 - a child that cannot be stopped ends by itself
        return None
    return None
