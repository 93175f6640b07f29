"""MCP tools in the kernel's catalogue: names, replay policies, argument checks, results. Pure.

A turn lists its servers' tools once, when it starts (``activities/mcp.py``); the listing is
a *catalogue*, stored as content and named in the turn's history by its reference, so a replay
sees the tools the turn started with. ``build(servers, listings)`` makes it::

    {"tools": [{"name": "mcp__git__git_status", "server", "tool", "description",
                "input_schema", "output_schema", "annotations", "policy", "task_support"}],
     "servers": {"git": {"ok", "hash", "tools", "error"?, "transport", "where"}},
     "problems": ["server \"x\": tool \"a.b\": ..."]}

* A tool's name is ``mcp__<server>__<tool>`` in the catalogue and to the model (a function
  name: at most 64 characters of ``[A-Za-z0-9_-]``; a tool whose name does not fit, or whose
  input schema is not a JSON Schema object, is left out and listed in ``problems``).
* ``policy_of(annotations, override)``: the replay policy. ``readOnlyHint`` or
  ``idempotentHint`` true -> ``safe``; anything else, an unannotated tool included ->
  ``unsafe``. The configuration's ``replay`` entry for the tool wins over both.
* ``server_hashes(catalogue)``: ``{server: hash of its tools}`` (``None`` for a server that could
  not be listed); it joins the turn's environment record as ``mcp``, so a tool list or schema
  that changed across a crash goes through ``AGENT_ENVIRONMENT_POLICY``.
* ``validate(tool, arguments)``: ``(True, arguments)`` or ``(False, error)`` with the kernel's
  ``invalid_arguments`` envelope (``kernel.turn.tools.ToolError``), checked against the tool's
  input schema before anything is sent.
* ``shape_result(raw, ...)``: a ``tools/call`` result as the tool result the model reads:
  ``{"ok", "kind"?, "message"?, "content": [...], "structuredContent"?}``; ``isError`` is a
  failure (``kind: "mcp_tool_error"``). Content items whose payload is larger than
  ``inline_bytes`` carry ``{"_store": text}`` for the activity to put in the content store
  (it replaces it by ``content_ref``); a result larger than ``max_bytes`` in all is the
  failure ``result_too_large``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from jsonschema import validators
from jsonschema.exceptions import SchemaError

from kernel.turn.mcp_config import McpServer
from kernel.turn.tools import ToolError, ToolPolicy

PREFIX = "mcp__"
FUNCTION_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
DESCRIPTION_CHARS = 1024


def is_mcp(name: str) -> bool:
    return name.startswith(PREFIX)


def qualified(server: str, tool: str) -> str:
    return f"{PREFIX}{server}__{tool}"


def policy_of(annotations: Mapping[str, Any] | None, override: ToolPolicy | None) -> ToolPolicy:
    """The replay policy of a tool with these annotations (see the module docstring)."""
    if override is not None:
        return override
    hints = annotations or {}
    return (
        "safe"
        if hints.get("readOnlyHint") is True or hints.get("idempotentHint") is True
        else "unsafe"
    )


def digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def build(
    servers: Sequence[McpServer], listings: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any]:
    """The catalogue of ``servers`` from their listings: ``{server: {"ok": True, "tools":
    [wire tool dicts]} | {"ok": False, "error": text}}``."""
    tools: list[dict[str, Any]] = []
    summary: dict[str, Any] = {}
    problems: list[str] = []
    for server in servers:
        listing = listings.get(server.name) or {"ok": False, "error": "not listed"}
        described = server.describe()
        if not listing.get("ok"):
            error = str(listing.get("error") or "unknown error")[:500]
            summary[server.name] = {
                **described,
                "ok": False,
                "hash": None,
                "tools": 0,
                "error": error,
            }
            problems.append(f'server "{server.name}": cannot list its tools: {error}')
            continue
        own: list[dict[str, Any]] = []
        for raw in listing.get("tools") or []:
            entry = _tool(server, raw, problems)
            if entry is not None:
                own.append(entry)
        own.sort(key=lambda item: item["name"])
        tools.extend(own)
        summary[server.name] = {**described, "ok": True, "hash": digest(own), "tools": len(own)}
    return {"tools": tools, "servers": summary, "problems": problems}


def _tool(server: McpServer, raw: Mapping[str, Any], problems: list[str]) -> dict[str, Any] | None:
    tool = str(raw.get("name") or "")
    name = qualified(server.name, tool)
    where = f'server "{server.name}": tool "{tool[:80]}"'
    if not FUNCTION_NAME.fullmatch(name):
        problems.append(f"{where}: {name[:80]} is not a function name ([A-Za-z0-9_-], at most 64)")
        return None
    schema = raw.get("inputSchema")
    if not isinstance(schema, dict) or schema.get("type") != "object":
        problems.append(f'{where}: its input schema is not a JSON Schema of "type": "object"')
        return None
    try:
        validators.validator_for(schema, default=validators.Draft202012Validator).check_schema(
            schema
        )
    except SchemaError as exc:
        problems.append(f"{where}: its input schema is invalid: {exc.message[:200]}")
        return None
    annotations = raw.get("annotations")
    annotations = annotations if isinstance(annotations, dict) else {}
    execution = raw.get("execution")
    execution = execution if isinstance(execution, dict) else {}
    return {
        "name": name,
        "server": server.name,
        "tool": tool,
        "description": str(raw.get("description") or "")[:DESCRIPTION_CHARS],
        "input_schema": schema,
        "output_schema": raw.get("outputSchema")
        if isinstance(raw.get("outputSchema"), dict)
        else None,
        "annotations": annotations,
        "policy": policy_of(annotations, server.replay.get(tool)),
        "task_support": execution.get("taskSupport") or "forbidden",
    }


def server_hashes(catalogue: Mapping[str, Any]) -> dict[str, str | None]:
    return {
        name: info.get("hash") for name, info in sorted((catalogue.get("servers") or {}).items())
    }


def find(catalogue: Mapping[str, Any], name: str) -> dict[str, Any] | None:
    for tool in catalogue.get("tools") or []:
        if tool["name"] == name:
            return dict(tool)
    return None


def unknown(catalogue: Mapping[str, Any], name: str) -> dict[str, Any]:
    server = name[len(PREFIX) :].split("__", 1)[0]
    listed = (catalogue.get("servers") or {}).get(server)
    if listed is None:
        why = f"no MCP server {server!r} is configured for this turn"
    elif not listed.get("ok"):
        why = (
            f"MCP server {server!r} could not be listed when the turn began: {listed.get('error')}"
        )
    else:
        known = ", ".join(t["name"] for t in catalogue.get("tools") or [] if t["server"] == server)
        why = f"MCP server {server!r} has no such tool; its tools: {known or 'none'}"
    return ToolError(kind="unknown_tool", tool=name, field="name", message=why[:1000]).to_dict()


def validate(tool: Mapping[str, Any], arguments: object) -> tuple[bool, dict[str, Any]]:
    """Check ``arguments`` against the tool's input schema before it is called."""
    name = str(tool["name"])
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return False, _invalid(name, [("arguments", "must be a JSON object")])
    schema = tool["input_schema"]
    checker = validators.validator_for(schema, default=validators.Draft202012Validator)(schema)
    problems = [
        (
            "arguments"
            + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path),
            error.message[:300],
        )
        for error in sorted(
            checker.iter_errors(arguments), key=lambda e: list(map(str, e.absolute_path))
        )
    ]
    if problems:
        return False, _invalid(name, problems[:10])
    return True, dict(arguments)


def _invalid(name: str, problems: list[tuple[str, str]]) -> dict[str, Any]:
    fields = [
        (field.removeprefix("arguments.") if field != "arguments" else field, message)
        for field, message in problems
    ]
    text = "; ".join(f"{f}: {m}" for f, m in fields)
    return ToolError(
        kind="invalid_arguments",
        tool=name,
        field=fields[0][0],
        message=f"invalid arguments for {name}: {text}"[:1000],
        problems=tuple(fields),
    ).to_dict()


def openai_specs(
    catalogue: Mapping[str, Any] | None, allowed: Collection[str] | None = None
) -> list[dict[str, Any]]:
    """The catalogue's tools as chat-completions ``tools`` entries (or only the ``allowed``)."""
    return [
        {
            "type": "function",
            "function": {
                "name": tool["name"],
                "description": tool["description"]
                or f"{tool['tool']} of the MCP server {tool['server']}",
                "parameters": tool["input_schema"],
            },
        }
        for tool in (catalogue or {}).get("tools") or []
        if allowed is None or tool["name"] in allowed
    ]


def shape_result(raw: Mapping[str, Any], *, inline_bytes: int, max_bytes: int) -> dict[str, Any]:
    """A ``tools/call`` result (wire JSON) as the tool result the model reads."""
    size = len(json.dumps(raw, ensure_ascii=False).encode())
    if size > max_bytes:
        return {
            "ok": False,
            "kind": "result_too_large",
            "message": f"the server answered {size} bytes; at most {max_bytes} are kept",
        }
    content = [
        _item(item, inline_bytes) for item in raw.get("content") or [] if isinstance(item, dict)
    ]
    result: dict[str, Any] = {"ok": not raw.get("isError"), "content": content}
    if raw.get("structuredContent") is not None:
        structured = raw["structuredContent"]
        if len(json.dumps(structured).encode()) > inline_bytes:
            result["structuredContent"] = {"_store": json.dumps(structured, ensure_ascii=False)}
        else:
            result["structuredContent"] = structured
    if raw.get("isError"):
        texts = [str(item.get("text")) for item in content if item.get("type") == "text"]
        result.update(
            kind="mcp_tool_error", message=("; ".join(texts) or "the tool reported an error")[:500]
        )
    return result


def _item(item: Mapping[str, Any], inline_bytes: int) -> dict[str, Any]:
    kind = item.get("type")
    shaped = {k: v for k, v in item.items() if k != "_meta"}
    if kind == "text":
        text = str(item.get("text") or "")
        if len(text.encode()) > inline_bytes:
            return {
                "type": "text",
                "_store": text,
                "bytes": len(text.encode()),
                "preview": text[:500],
            }
        return shaped
    if kind in ("image", "audio"):
        data = str(item.get("data") or "")
        return {"type": kind, "mimeType": item.get("mimeType"), "_store": data, "bytes": len(data)}
    if kind == "resource":
        resource = dict(item.get("resource") or {})
        if "blob" in resource or len(str(resource.get("text") or "").encode()) > inline_bytes:
            payload = str(resource.pop("blob", None) or resource.pop("text", None) or "")
            return {
                "type": "resource",
                "resource": resource,
                "_store": payload,
                "bytes": len(payload.encode()),
            }
        return shaped
    return shaped  # resource_link and anything newer: small by nature, kept as given
