"""``execute_tool``: the one activity every tool runs through, guarded by the attempt ledger.

Input ``{"key", "tool_task_id", "name", "arguments", "policy", "session_id", "timeout_s",
"lease_s"}``: ``key`` is the attempt record ``{submission}:{round}:{call}:{attempt}`` (the
orchestrator decides the attempt number), ``arguments`` the validated final arguments and
``policy`` the replay policy saved with the intent. The tool name is data: an unknown tool is a
tool error the model sees, never a crash.

What happens, by the state of the attempt record (``kernel.turn.policy.replay_decision``):

* ``run``: create the record (create-if-absent; only its creator runs the tool), run the tool
  while a heartbeat renews the lease, write the result into the record, return it;
* ``reuse_result``: the tool already ran and its result is in the record: return it;
* ``wait``: another execution holds a live lease: return ``{"status": "leased",
  "retry_after"}`` and let the orchestrator sleep on a durable timer, then ask again;
* an expired lease (the process died while the tool ran): re-run it only if the saved and the
  current policy are both ``safe``; otherwise record and return ``interrupted``, which the model
  and the user see.

Returns ``{"status": "done" | "interrupted" | "leased", "result", "documents", "result_ref",
"runs", "reused", "retry_after"}``. ``result`` is ``{"ok": true, ...}`` or
``{"ok": false, "kind", "message"}``. ``documents`` are the session document changes a note tool
asks for: the tool task commits them together with "tool completed", so they apply exactly
once. A result above ``tool_env.INLINE_RESULT_BYTES`` is stored in the content store and returned as
``result_ref`` as well. A tool slower than ``timeout_s`` gives ``{"ok": false, "kind":
"timeout"}``; its record keeps its lease until the tool really ends.

Built-in tools: ``calculator``; ``read_document`` / ``write_document`` / ``delete_document`` (the
session's ``note`` documents, one per title, ``kernel.turn.tools.note_document_id``; a delete writes
the document's tombstone version); ``append_ledger`` appends one
line to the file ``AGENT_TOOL_LEDGER_FILE`` (default ``.durable/tool-ledger.txt``) - unsafe,
every run adds a line. MCP tools (``mcp__<server>__<tool>``) are one ``tools/call`` each
(``activities.mcp.run``), their current policy the server's annotations under the
configuration in force (docs/tools.md). The workspace tools (``list_files`` ... ``run_python``) are
``activities.workspace_tools``. ``send_notices`` does not run here: its execution is the
``send_notices`` sub-orchestration.

Progress (``AGENT_PREVIEWS=on``): a running tool is shown as a preview under its tool task
(``adapters.previews``, coalesced): ``running <name>`` when it starts, then whatever the tool
reports through ``ToolEnv.progress``. Progress is never part of the result and is superseded
when "tool completed" is committed.

Crash points for tests: ``KERNEL_FAULTS="tool.after_effect[@n]"`` kills the process the n-th
time a tool has run but its result is not yet in the record - the window the ledger exists for.
``KERNEL_FAULTS="tool.raise.<tool>@n"`` makes that tool raise on its first n runs in this
process (a ``tool_error``), for the retries and failure handlers of the catalogue.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import azure.durable_functions as df

from activities import mcp as mcp_tools
from activities import skills as skill_activities
from activities import workspace_tools
from activities.tool_env import (
    Outcome,
    Result,
    ToolEnv,
    ToolFn,
    no_progress,
    stored_if_large,
    tool_progress,
)
from adapters import telemetry
from adapters.attempt_ledger import AttemptLedger, LeaseLost, attempt_state, default_ledger
from entities import session_pages
from kernel.turn import calculator, mcp_catalogue, tools
from kernel.turn.policy import replay_decision

bp = df.Blueprint()


@bp.activity_trigger(input_name="job")
@bp.durable_client_input(client_name="client")
async def execute_tool(
    job: dict[str, Any], client: df.DurableOrchestrationClient
) -> dict[str, Any]:
    with telemetry.tool_call(job) as call:  # one span per run: tool name and outcome
        return call.record(await _execute(job, client))


async def _execute(job: dict[str, Any], client: df.DurableOrchestrationClient) -> dict[str, Any]:
    ledger = default_ledger()
    key, name = job["key"], job["name"]
    spec = tools.TOOLS.get(name)
    record = await asyncio.to_thread(ledger.read, key)
    state = attempt_state(record, ledger.now())
    current = spec.policy if spec else None
    if mcp_catalogue.is_mcp(name) and state == "expired":  # the server's annotations, now
        current = await mcp_tools.current_policy(job)
    decision = replay_decision(job.get("policy"), current, state)
    owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex}"
    lease_s = float(job.get("lease_s") or 30)
    if decision == "reuse_result":
        assert record is not None
        return {**record.result, "reused": True}
    if decision == "wait":
        assert record is not None
        return {
            "status": "leased",
            "retry_after": max(0.05, record.lease_expires_at - ledger.now()),
        }
    if decision == "interrupted":
        return await _interrupted(ledger, key, name)
    if state == "absent":
        if not await asyncio.to_thread(ledger.create, key, owner, lease_s):
            return {"status": "leased", "retry_after": 0.05}  # lost the race: look again
    else:  # expired, and safe to run again
        assert record is not None
        if not await asyncio.to_thread(ledger.take_over, key, owner, lease_s, record.owner):
            return {"status": "leased", "retry_after": 0.05}
    progress = tool_progress(job)
    env = ToolEnv(
        job["session_id"],
        client,
        progress.update if progress else no_progress,
        str(job.get("tool_task_id") or ""),
    )
    try:
        return await _run(ledger, key, owner, lease_s, job, env)
    finally:
        if progress is not None:
            await progress.aclose()  # superseded by the "tool completed" commit


async def _run(
    ledger: AttemptLedger, key: str, owner: str, lease_s: float, job: dict[str, Any], env: ToolEnv
) -> dict[str, Any]:
    heartbeat = asyncio.create_task(_heartbeat(ledger, key, owner, lease_s))
    try:
        call = (
            mcp_tools.run(job, env)
            if mcp_catalogue.is_mcp(job["name"])
            else _call(job["name"], job.get("arguments") or {}, env)
        )
        outcome = await asyncio.wait_for(call, float(job.get("timeout_s") or 300))
    except TimeoutError:
        # The tool may still finish later and record its result; this answer is only "late".
        message = f"{job['name']} did not finish within {job.get('timeout_s')} s"
        return {
            "status": "done",
            "result": {"ok": False, "kind": "timeout", "message": message},
            "documents": [],
            "runs": None,
        }
    except Exception as exc:  # noqa: BLE001 - a failing tool is a result the model sees
        outcome = Outcome({"ok": False, "kind": "tool_error", "message": f"{job['name']}: {exc}"})
    finally:
        heartbeat.cancel()
    crash_point("tool.after_effect")
    payload = {
        "status": "done",
        "result": outcome.result,
        "documents": outcome.documents,
        "result_ref": await asyncio.to_thread(stored_if_large, outcome.result),
    }
    try:
        saved = await asyncio.to_thread(ledger.complete, key, payload, owner)
    except LeaseLost:  # our lease ran out and another execution took the record over: its
        return {"status": "leased", "retry_after": 0.05}  # result is the one that counts
    record = await asyncio.to_thread(ledger.read, key)
    return {**saved, "runs": record.runs if record else 1}


async def _interrupted(ledger: AttemptLedger, key: str, name: str) -> dict[str, Any]:
    message = (
        f"{name} was interrupted: it started, but the process running it stopped before "
        "its result was saved. It is not safe to run it again, so it was not."
    )
    payload: dict[str, Any] = {
        "status": "interrupted",
        "documents": [],
        "result_ref": None,
        "result": {"ok": False, "kind": "interrupted", "message": message},
    }
    return {**await asyncio.to_thread(ledger.complete, key, payload)}


async def _heartbeat(ledger: AttemptLedger, key: str, owner: str, lease_s: float) -> None:
    while True:
        await asyncio.sleep(lease_s / 3)
        if not await asyncio.to_thread(ledger.renew, key, owner, lease_s):
            return


async def _call(name: str, arguments: dict[str, Any], env: ToolEnv) -> Outcome:
    run = _TOOLS.get(name)
    if run is None:
        known = ", ".join(sorted(_TOOLS))
        return Outcome(
            {
                "ok": False,
                "kind": "unknown_tool",
                "message": f"no tool {name!r} runs here; known: {known}",
            }
        )
    raise_point(f"tool.raise.{name}")
    return await run(arguments, env)


# --- the built-in tools -------------------------------------------------------------------------


async def _calculator(args: dict[str, Any], env: ToolEnv) -> Outcome:
    value = calculator.evaluate(args["expression"])
    if isinstance(value, calculator.CalcError):
        return Outcome({"ok": False, "kind": "calculation_error", "message": value.message})
    return Outcome({"ok": True, "expression": args["expression"], "value": value})


async def _append_ledger(args: dict[str, Any], env: ToolEnv) -> Outcome:
    path = Path(os.environ.get("AGENT_TOOL_LEDGER_FILE") or ".durable/tool-ledger.txt")
    line = " ".join(str(args["text"]).split())  # one entry, one line
    await asyncio.to_thread(_append_line, path, line)
    return Outcome({"ok": True, "appended": line})


def _append_line(path: Path, line: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as file:
        file.write(line + "\n")
        file.flush()
        os.fsync(file.fileno())


async def _read_document(args: dict[str, Any], env: ToolEnv) -> Outcome:
    title = args["title"]
    document = await _note(env, title)
    if document is None:
        return Outcome(_not_found(title))
    return Outcome(
        {
            "ok": True,
            "title": title,
            "text": document["data"]["text"],
            "version": document["version"],
        }
    )


async def _write_document(args: dict[str, Any], env: ToolEnv) -> Outcome:
    title, text = args["title"], args["text"]
    change = {
        "id": tools.note_document_id(title),
        "type": "note",
        "data": {"title": title, "text": text},
    }
    return Outcome({"ok": True, "title": title, "saved": True}, [change])


async def _delete_document(args: dict[str, Any], env: ToolEnv) -> Outcome:
    title = args["title"]
    document = await _note(env, title)
    if document is None:
        return Outcome(_not_found(title))
    change = {
        "id": tools.note_document_id(title),
        "type": "note",
        "delete": True,
        "expected_version": document["version"],
    }
    return Outcome({"ok": True, "title": title, "deleted": True}, [change])


async def _note(env: ToolEnv, title: str) -> dict[str, Any] | None:
    head = await session_pages.read_head(env.client, env.session_id)
    document = session_pages.document(head, tools.note_document_id(title))
    # A tombstone is a deleted note; so is an empty one, which is how older versions deleted.
    if document is None or document.get("type") != "note" or document.get("deleted"):
        return None
    if not document["data"].get("text"):
        return None
    return document


async def _register_skill(args: dict[str, Any], env: ToolEnv) -> Outcome:
    return Outcome(await skill_activities.register_from_agent(args, env.session_id))


def _not_found(title: str) -> Result:
    return {"ok": False, "kind": "not_found", "message": f'there is no note titled "{title}"'}


_TOOLS: dict[str, ToolFn] = {
    "calculator": _calculator,
    "append_ledger": _append_ledger,
    "read_document": _read_document,
    "write_document": _write_document,
    "delete_document": _delete_document,
    "register_skill": _register_skill,
    **workspace_tools.TOOLS,
}


# --- crash points -------------------------------------------------------------------------------

_FAULT_PLAN = {
    point: int(count or 1)
    for point, _, count in (
        item.strip().partition("@")
        for item in os.environ.get("KERNEL_FAULTS", "").split(",")
        if item.strip()
    )
}
_faults_seen: Counter[str] = Counter()


def crash_point(point: str) -> None:
    """Kill this process the n-th time ``point`` is reached, if ``KERNEL_FAULTS`` plans it."""
    if point not in _FAULT_PLAN:
        return
    _faults_seen[point] += 1
    if _faults_seen[point] == _FAULT_PLAN[point]:
        sys.stderr.write(f"fault injection: SIGKILL at {point}@{_FAULT_PLAN[point]}\n")
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)


def raise_point(point: str) -> None:
    """Raise the first n times ``point`` is reached, if ``KERNEL_FAULTS`` plans ``point@n``."""
    if point not in _FAULT_PLAN:
        return
    _faults_seen[point] += 1
    if _faults_seen[point] <= _FAULT_PLAN[point]:
        raise RuntimeError(f"injected failure {_faults_seen[point]} of {_FAULT_PLAN[point]}")
