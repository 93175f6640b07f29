"""MCP tools in the turn: the catalogue activity, the argument check, and one call.

* ``list_mcp_tools`` (activity, at the start of a turn when ``AGENT_MCP_SERVERS`` names
  servers): lists every server's tools at once, builds the catalogue
  (``kernel.turn.mcp_catalogue.build``), stores it as content and answers ``{"ok": True,
  "ref", "servers": {server: hash | None}, "tools": <count>, "problems"}``; the reference and
  the hashes are what the turn's history holds. ``{"ok": False, "message"}`` for a
  configuration that cannot be used (the message names the server and the field).
* ``check_mcp_call`` (activity, the *call* phase of an MCP tool task): ``{"mcp": {"ref"},
  "name", "arguments", "allowed"?}`` -> ``{"ok": True, "arguments", "policy",
  "on_interrupted", "max_attempts", "server", "tool"}`` or ``{"ok": False, "error": <the
  kernel's tool error envelope>}``: unknown tool, not allowed, or arguments that break the
  tool's input schema. Nothing is sent to the server before this passes.
* ``poll_mcp_task`` and ``cancel_mcp_task`` (activities): one ``tasks/get`` of a call the
  server runs as an MCP task, and its ``tasks/cancel`` (``orchestrators/mcp_task.py``).
* ``current_policy(job)`` and ``run(job, env)``: what ``execute_tool`` asks for an MCP tool:
  its replay policy now (the recorded annotations under the configuration in force now) and one
  call, under the server's time limit, its result shaped for the model with large content put
  in the content store (``content_ref``).
* ``current_hashes(environ)``: ``{server: hash}`` of the tools this host sees now, for the
  environment check (a server that cannot be reached now answers ``None``; the check keeps the
  recorded hash for it: a server that is down is a failed call, not a changed environment).

Listings are cached per process for ``AGENT_MCP_CATALOGUE_TTL_S`` (default 60 s), so a turn's
environment checks do not spawn every stdio server each round; a new process lists anew.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import time
from collections.abc import Mapping
from typing import Any

import azure.durable_functions as df

from activities.tool_env import (
    INLINE_RESULT_BYTES,
    Outcome,
    ToolEnv,
    stored_if_large,
    tool_progress,
)
from adapters import mcp_client
from adapters.content_store import default_store
from entities import session_pages
from kernel.turn import mcp_catalogue, mcp_config
from kernel.turn.mcp_config import McpConfigError, McpServer
from kernel.turn.tools import ToolPolicy

bp = df.Blueprint()
log = logging.getLogger("kernel.mcp")
LIST_TIMEOUT_S = 30.0
INLINE_CONTENT_BYTES = 4 * 1024
MAX_RESULT_BYTES = 4 * 1024 * 1024
_listings: dict[str, tuple[float, dict[str, Any]]] = {}


def _ttl() -> float:
    try:
        return max(0.0, float(os.environ.get("AGENT_MCP_CATALOGUE_TTL_S") or 60))
    except ValueError:
        return 60.0


async def _list(server: McpServer) -> dict[str, Any]:
    key = mcp_client.dumps(server.describe() | {"config": repr(server)})
    now = time.monotonic()
    cached = _listings.get(key)
    if cached is not None and now - cached[0] < _ttl():
        return cached[1]
    listing = await mcp_client.list_tools(server, os.environ, min(LIST_TIMEOUT_S, server.timeout_s))
    if listing.get("ok"):
        _listings[key] = (now, listing)
    return listing


async def catalogue_now(configured: tuple[McpServer, ...]) -> dict[str, Any]:
    found = await asyncio.gather(*(_list(server) for server in configured))
    return mcp_catalogue.build(
        configured, {s.name: f for s, f in zip(configured, found, strict=True)}
    )


@bp.activity_trigger(input_name="job")
async def list_mcp_tools(job: dict[str, Any]) -> dict[str, Any]:
    try:
        configured = mcp_client.servers()
    except McpConfigError as exc:
        return {"ok": False, "message": str(exc)}
    catalogue = await catalogue_now(configured)
    for problem in catalogue["problems"]:
        log.warning("MCP catalogue of %s: %s", job.get("turn"), problem)
    ref = await asyncio.to_thread(default_store().put, mcp_client.dumps(catalogue))
    return {
        "ok": True,
        "ref": ref,
        "servers": mcp_catalogue.server_hashes(catalogue),
        "tools": len(catalogue["tools"]),
        "problems": [p[:300] for p in catalogue["problems"][:10]],
    }


@functools.lru_cache(maxsize=32)
def _stored(ref: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(default_store().get(ref))
    return loaded


async def catalogue_of(job: Mapping[str, Any]) -> dict[str, Any]:
    """The catalogue a turn recorded (``job["mcp"]["ref"]``), or an empty one."""
    ref = (job.get("mcp") or {}).get("ref")
    return await asyncio.to_thread(_stored, ref) if ref else {"tools": [], "servers": {}}


@bp.activity_trigger(input_name="job")
async def check_mcp_call(job: dict[str, Any]) -> dict[str, Any]:
    name = str(job["name"])
    catalogue = await catalogue_of(job)
    tool = mcp_catalogue.find(catalogue, name)
    if tool is None:
        return {"ok": False, "error": mcp_catalogue.unknown(catalogue, name)}
    allowed = job.get("allowed")
    if allowed is not None and name not in allowed:
        message = f"{name} is not one of this run's tools: {', '.join(allowed) or 'none'}"
        error = {"ok": False, "kind": "tool_not_allowed", "tool": name, "field": "name"}
        return {"ok": False, "error": {**error, "message": message, "problems": []}}
    valid, checked = mcp_catalogue.validate(tool, job.get("arguments"))
    if not valid:
        return {"ok": False, "error": checked}
    server = _configured(tool["server"])
    return {
        "ok": True,
        "arguments": checked,
        "server": tool["server"],
        "tool": tool["tool"],
        "policy": _policy(tool, server),
        "on_interrupted": server.on_interrupted if server else "report",
        "max_attempts": server.max_attempts if server else 1,
        "task_timeout_s": server.task_timeout_s if server else mcp_config.DEFAULT_TASK_TIMEOUT_S,
    }


def _configured(name: str) -> McpServer | None:
    try:
        return next((s for s in mcp_client.servers() if s.name == name), None)
    except McpConfigError:
        return None


def _policy(tool: Mapping[str, Any], server: McpServer | None) -> ToolPolicy:
    """The recorded annotations under the configuration in force now (its ``replay``)."""
    override = server.replay.get(tool["tool"]) if server else None
    return mcp_catalogue.policy_of(tool.get("annotations"), override)


async def current_policy(job: Mapping[str, Any]) -> ToolPolicy | None:
    """The replay policy of the job's MCP tool now; None (not safe) when it is not known."""
    tool = mcp_catalogue.find(await catalogue_of(job), str(job["name"]))
    return None if tool is None else _policy(tool, _configured(tool["server"]))


async def run(job: Mapping[str, Any], env: ToolEnv) -> Outcome:
    """One call of the job's MCP tool; every trouble is a result the model reads."""
    name = str(job["name"])
    tool = mcp_catalogue.find(await catalogue_of(job), name)
    if tool is None:
        return Outcome(
            {"ok": False, "kind": "unknown_tool", "message": f"{name} is not catalogued"}
        )
    server = _configured(tool["server"])
    if server is None:
        message = f"the MCP server {tool['server']} is no longer configured (AGENT_MCP_SERVERS)"
        return Outcome({"ok": False, "kind": "mcp_unavailable", "message": message})
    timeout_s = min(server.timeout_s, float(job.get("timeout_s") or server.timeout_s))
    called = await mcp_client.call_tool(
        server,
        os.environ,
        tool["tool"],
        dict(job.get("arguments") or {}),
        timeout_s,
        env.progress,
        follow_tasks=server.transport == "http",
    )
    if not called["ok"]:
        return Outcome({k: called[k] for k in ("ok", "kind", "message")} | {"sent": called["sent"]})
    if "task" in called:
        # The handle is this attempt's outcome: saved in the ledger before the activity
        # returns, so a crash from here on polls the task and never calls again.
        handle = called["task"] | {"server": tool["server"], "tool": tool["tool"]}
        return Outcome({"ok": True, "mcp_task": handle})
    return Outcome(await _shaped(called["raw"]))


async def _shaped(raw: Mapping[str, Any]) -> dict[str, Any]:
    shaped = mcp_catalogue.shape_result(
        raw, inline_bytes=INLINE_CONTENT_BYTES, max_bytes=MAX_RESULT_BYTES
    )
    return await asyncio.to_thread(_store_large, shaped)


@bp.activity_trigger(input_name="job")
@bp.durable_client_input(client_name="client")
async def poll_mcp_task(
    job: dict[str, Any], client: df.DurableOrchestrationClient
) -> dict[str, Any]:
    """One ``tasks/get`` of an MCP call's task (``job``: ``mcp``, ``name``, ``task_id``,
    ``session_id``, ``submission_id``, ``tool_task_id``, ``timeout_s``). ``{"status":
    "working" | "input_required", "pollIntervalMs"?, "statusMessage"?}`` while it runs;
    ``{"status": "done", "result"}`` once it ended (or the server no longer knows it);
    ``{"status": "unreachable", "kind", "message"}`` when this poll failed (the next one asks
    again); ``{"status": "cancel_requested", "reason"}`` when the submission was cancelled
    (or ended) meanwhile, without asking the server. The task's status message is the tool
    task's live preview, never history."""
    cancel = await session_pages.stop_reason(
        client, str(job["session_id"]), str(job["submission_id"])
    )
    if cancel is not None:
        return {"status": "cancel_requested", "reason": cancel}
    name, task_id = str(job["name"]), str(job["task_id"])
    tool = mcp_catalogue.find(await catalogue_of(job), name)
    server = _configured(tool["server"]) if tool else None
    if tool is None or server is None:
        message = f"{name} is no longer configured; its task {task_id} is not followed"
        return {
            "status": "done",
            "result": {"ok": False, "kind": "mcp_unavailable", "message": message},
        }
    timeout_s = min(server.timeout_s, float(job.get("timeout_s") or server.timeout_s))
    polled = await mcp_client.get_task(server, os.environ, task_id, timeout_s, tool["tool"])
    if not polled["ok"]:
        failure = {k: polled[k] for k in ("ok", "kind", "message")}
        if polled["kind"] in ("mcp_task_lost", "invalid_result"):
            return {"status": "done", "result": failure}
        return {"status": "unreachable", "kind": polled["kind"], "message": polled["message"]}
    status = polled["status"]
    await _preview(
        job,
        f"{tool['tool']}: task {status}"
        + (f": {polled['statusMessage']}" if polled.get("statusMessage") else ""),
    )
    if status == "completed":
        result = await _shaped(polled.get("result") or {})
        ref = await asyncio.to_thread(stored_if_large, result)
        return {"status": "done", "result": result, "result_ref": ref}
    if status in ("failed", "cancelled"):
        error = polled.get("error") or {}
        said = error.get("message") or polled.get("statusMessage") or "no reason given"
        message = f"{tool['tool']} (task {task_id}) {status}: {said}"[:1000]
        return {
            "status": "done",
            "result": {"ok": False, "kind": f"mcp_task_{status}", "message": message},
        }
    return {
        "status": status,
        **{k: polled[k] for k in ("pollIntervalMs", "statusMessage") if polled.get(k) is not None},
    }


@bp.activity_trigger(input_name="job")
async def cancel_mcp_task(job: dict[str, Any]) -> dict[str, Any]:
    """``tasks/cancel`` of an MCP call's task the kernel stopped following (best effort)."""
    tool = mcp_catalogue.find(await catalogue_of(job), str(job["name"]))
    server = _configured(tool["server"]) if tool else None
    if server is None:
        return {"cancelled": False}
    done = await mcp_client.cancel_task(
        server, os.environ, str(job["task_id"]), min(server.timeout_s, 30.0)
    )
    return {"cancelled": done}


async def _preview(job: Mapping[str, Any], text: str) -> None:
    writer = tool_progress(dict(job))
    if writer is not None:
        writer.update(text[:500])
        await writer.aclose()


def _store_large(result: dict[str, Any]) -> dict[str, Any]:
    """Put every ``_store`` payload in the content store; the item keeps its reference."""
    store = default_store()
    content = []
    for item in result.get("content") or []:
        if "_store" in item:
            item = {k: v for k, v in item.items() if k != "_store"} | {
                "content_ref": store.put(item["_store"])
            }
        content.append(item)
    shaped = {**result, "content": content} if "content" in result else dict(result)
    structured = result.get("structuredContent")
    if isinstance(structured, dict) and set(structured) == {"_store"}:
        shaped["structuredContent"] = {"content_ref": store.put(structured["_store"])}
    if len(mcp_client.dumps(shaped).encode()) > INLINE_RESULT_BYTES:
        # Many small items add up: every text goes by reference, so what the history keeps
        # stays small whatever the server sends.
        shaped["content"] = [_by_reference(store, item) for item in shaped.get("content") or []]
        kept = shaped.get("structuredContent")
        if kept is not None and not (isinstance(kept, dict) and set(kept) == {"content_ref"}):
            shaped["structuredContent"] = {"content_ref": store.put(mcp_client.dumps(kept))}
    return shaped


def _by_reference(store: Any, item: dict[str, Any]) -> dict[str, Any]:
    if item.get("type") != "text" or "text" not in item:
        return item
    text = str(item["text"])
    return {
        "type": "text",
        "content_ref": store.put(text),
        "bytes": len(text.encode()),
        "preview": text[:200],
    }


async def current_hashes(recorded: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``{server: hash}`` now; a server unreachable now keeps its recorded hash. None when no
    server is configured (and none was recorded)."""
    try:
        configured = mcp_client.servers()
    except McpConfigError as exc:
        return {"configuration": str(exc)[:200]}
    if not configured:
        return None
    catalogue = await catalogue_now(configured)
    hashes = mcp_catalogue.server_hashes(catalogue)
    before = recorded or {}
    return {
        name: (value if value is not None else before.get(name)) for name, value in hashes.items()
    }
