"""What a tool, resource or prompt function returned, as the protocol's result (pure).

The extension reads a function's return value in one of two ways, chosen by the trigger's
``useResultSchema``:

* off: the value's text becomes one text content block (a tool), one text message of role
  ``user`` (a prompt);
* on: the value is an envelope ``{"type", "content", "structuredContent"}`` whose ``type``
  is ``call_tool_result`` (``content`` is a whole ``CallToolResult``),
  ``multi_content_result`` (a list of blocks) or a block type (one block); a prompt's
  envelope is ``get_prompt_result`` or ``prompt_messages``.

A resource's string that holds ``{"content": <resource contents JSON>}`` is those contents
(the URI and MIME type filled from the request and the declaration when missing); any other
string is text, bytes are a base64 blob.

The host converts the function's own return value, not the text the 1.26 library makes of
it: objects of the ``mcp`` SDK (``CallToolResult``, content blocks, lists of blocks,
``GetPromptResult``, prompt messages - found by their module, ``mcp.types`` in the SDK's 1.x
line and ``mcp_types`` in 2.x, which the 1.26 wrapper does not recognise and turns into their
repr) become real protocol results, and ``@func.mcp_content`` objects structured content, as
the library's 2.x line returns them (``docs/extension-semantics.md``). Wire names are the
protocol's (``mimeType``, ``structuredContent``, ``isError``).

``ResultError`` is a value the extension would refuse; the caller answers it as a failed call.
"""

from __future__ import annotations

import base64
import dataclasses
import json
from typing import Any

BLOCK_TYPES = ("text", "image", "audio", "resource", "resource_link")


class ResultError(Exception):
    pass


def is_sdk_object(value: Any) -> bool:
    """An object of the MCP SDK's types (pydantic models of ``mcp.types`` / ``mcp_types``)."""
    module = getattr(type(value), "__module__", "") or ""
    return (module.startswith(("mcp.types", "mcp_types")) or module == "mcp") and hasattr(
        value, "model_dump"
    )


def dump(value: Any) -> Any:
    """An SDK object as its wire JSON (aliases such as ``mimeType``, no unset fields; without
    the 2.x SDK's ``resultType``, a field of the 2026 protocol this server does not speak)."""
    data = value.model_dump(mode="json", by_alias=True, exclude_none=True)
    if isinstance(data, dict):
        data.pop("resultType", None)
    return data


def _sdk_kind(value: Any) -> str:
    return type(value).__name__


def _is_content_marked(value: Any) -> bool:
    return getattr(type(value), "__mcp_content__", False) is True


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def tool_result(value: Any, use_result_schema: bool) -> dict[str, Any]:
    """A tool function's return value as a ``CallToolResult``."""
    if value is None:
        return {"content": []}
    if is_sdk_object(value) or (
        isinstance(value, list) and value and all(is_sdk_object(v) for v in value)
    ):
        return _sdk_tool_result(value, use_result_schema)
    if isinstance(value, bytes | bytearray):
        value = bytes(value).decode("utf-8", errors="replace")
    if _is_content_marked(value) or (use_result_schema and not isinstance(value, str)):
        return _structured(value)
    if isinstance(value, str):
        return envelope_result(value) if use_result_schema else {"content": [_text(value)]}
    return {"content": [_text(str(value))]}


def _sdk_tool_result(value: Any, use_result_schema: bool) -> dict[str, Any]:
    if isinstance(value, list):
        return {"content": [dump(v) for v in value]}
    data = dump(value)
    if _sdk_kind(value) == "CallToolResult":
        return dict(data)
    if isinstance(data, dict) and data.get("type") in BLOCK_TYPES:
        out: dict[str, Any] = {"content": [data]}
        if use_result_schema:  # the 1.26 wrapper's envelope carries the block as structured content
            out["structuredContent"] = data
        return out
    return _structured(data)


def _structured(value: Any) -> dict[str, Any]:
    """A plain object (an ``@mcp_content`` dataclass, a class, a dict...) as text JSON and,
    when it is a JSON object, structured content."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        data: Any = dataclasses.asdict(value)
    elif isinstance(value, dict | list | int | float | bool):
        data = value
    elif hasattr(value, "__dict__"):
        data = dict(vars(value))
    else:
        data = str(value)
    text = json.dumps(data, default=str)
    out: dict[str, Any] = {"content": [_text(text)]}
    if isinstance(data, dict):
        out["structuredContent"] = json.loads(text)
    return out


def envelope_result(text: str) -> dict[str, Any]:
    """The extension's reading of a ``useResultSchema`` string: the envelope above."""
    try:
        envelope = json.loads(text)
        if not isinstance(envelope, dict) or not isinstance(envelope.get("type"), str):
            raise TypeError("not an envelope")
        kind = envelope["type"].lower()
        content = envelope.get("content")
        parsed = json.loads(content) if isinstance(content, str) else content
        if kind == "call_tool_result":
            if not isinstance(parsed, dict):
                raise ValueError("call_tool_result content is not an object")
            return parsed
        blocks = parsed if kind == "multi_content_result" else [parsed]
        if (
            not isinstance(blocks, list)
            or not blocks
            or not all(isinstance(b, dict) for b in blocks)
        ):
            raise ValueError("no content blocks")
        out: dict[str, Any] = {"content": blocks}
        structured = envelope.get("structuredContent")
        if structured:
            out["structuredContent"] = (
                json.loads(structured) if isinstance(structured, str) else structured
            )
        return out
    except (ValueError, TypeError) as exc:
        raise ResultError(
            f"the function's return value is not a tool result envelope ({exc})"
        ) from exc


def resource_result(value: Any, uri: str, mime_type: str | None) -> dict[str, Any]:
    """A resource function's return value as a ``ReadResourceResult`` for ``uri``."""
    if value is None:
        return {"contents": []}
    if is_sdk_object(value):
        data = dump(value)
        if _sdk_kind(value) == "ReadResourceResult":
            return dict(data)
        return {"contents": [_fill(data, uri, mime_type)]}
    if isinstance(value, bytes | bytearray):
        blob = base64.b64encode(bytes(value)).decode()
        return {"contents": [_fill({"uri": uri, "blob": blob}, uri, mime_type)]}
    text = value if isinstance(value, str) else str(value)
    try:
        envelope = json.loads(text)
    except ValueError:
        envelope = None
    if isinstance(envelope, dict) and isinstance(envelope.get("content"), str):
        try:
            contents = json.loads(envelope["content"])
        except ValueError:
            contents = None
        if isinstance(contents, dict):
            return {"contents": [_fill(contents, uri, mime_type)]}
    return {"contents": [_fill({"uri": uri, "text": text}, uri, mime_type)]}


def _fill(contents: dict[str, Any], uri: str, mime_type: str | None) -> dict[str, Any]:
    out = dict(contents)
    if not out.get("uri"):
        out["uri"] = uri
    if not out.get("mimeType") and mime_type:
        out["mimeType"] = mime_type
    return out


def prompt_result(value: Any, use_result_schema: bool) -> dict[str, Any]:
    """A prompt function's return value as a ``GetPromptResult``."""
    if value is None:
        return {"messages": []}
    if is_sdk_object(value):
        if _sdk_kind(value) == "GetPromptResult":
            return dict(dump(value))
        return {"messages": [dump(value)]}
    if isinstance(value, list) and value and all(is_sdk_object(v) for v in value):
        return {"messages": [dump(v) for v in value]}
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    if not use_result_schema:
        return {"messages": [{"role": "user", "content": _text(text)}]}
    try:
        envelope = json.loads(text)
        kind = str(envelope["type"]).lower()
        content = json.loads(envelope["content"])
    except (ValueError, TypeError, KeyError) as exc:
        raise ResultError(f"the prompt's return value is not a prompt result envelope ({exc})")
    if kind == "get_prompt_result" and isinstance(content, dict):
        return content
    if kind == "prompt_messages" and isinstance(content, list):
        return {"messages": content}
    raise ResultError(f"unknown prompt result type '{kind}'")
