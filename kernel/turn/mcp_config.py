"""``AGENT_MCP_SERVERS``: the MCP servers whose tools the agent may use. Pure.

The setting is inline JSON or the path of a JSON file (the adapter reads the file; this module
only sees the text), in the shape MCP clients share::

    {"mcpServers": {
        "git":  {"command": "mcp-server-git", "args": ["--repository", "/srv/repo"],
                 "env": {"GIT_AUTHOR_NAME": "agent"}, "cwd": "/srv"},
        "docs": {"url": "https://mcp.example.com/mcp",
                 "headers": {"Authorization": "Bearer %DOCS_TOKEN%"}},
    }}

A server is ``stdio`` (``command``, ``args``, ``env``, ``cwd``) or Streamable HTTP (``url``,
``headers``); ``type`` may say which (``stdio``, ``http``, ``streamable-http``) and must agree.
Kernel fields, all optional:

* ``replay``: ``{"<tool>": "safe" | "unsafe"}`` overrides the policy the server's annotations
  give (``kernel.turn.mcp_catalogue.policy_of``);
* ``onInterrupted``: ``"report"`` (default: an interrupted unsafe call is a result the model
  reads) or ``"attention"`` (the tool task parks as needs_attention until an operator retries
  or aborts it);
* ``timeoutS``: the time limit of one call to this server (default 60, at most the turn's
  ``AGENT_TOOL_TIMEOUT_S``);
* ``maxAttempts``: tries of a ``safe`` tool whose server is down or too slow (default 3);
* ``taskTimeoutS``: how long a call the server runs as an MCP task may take, polls included
  (default 3600); then the kernel cancels the task and the call is an ``mcp_task_timeout``.

Secrets: a value of ``env`` or ``headers`` written ``%NAME%`` (whole or inside a longer value)
is the app setting ``NAME``, read when the server is reached (``resolve``), never stored: the
parsed configuration keeps the placeholder, so histories, the session and logs never hold it.

``parse(text)`` returns the servers or raises ``McpConfigError`` naming the server and the
field (``server "git": args[1]: must be a string``). Server names are what the catalogue puts in
tool names (``mcp__<server>__<tool>``), so they are 1..24 characters of ``[A-Za-z0-9_-]`` and
contain no ``__``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from kernel.turn.tools import ToolPolicy

SETTING = "AGENT_MCP_SERVERS"
SERVER_NAME = re.compile(r"[A-Za-z0-9_-]{1,24}")
PLACEHOLDER = re.compile(r"%([A-Za-z_][A-Za-z0-9_]*)%")
DEFAULT_TIMEOUT_S = 60.0
DEFAULT_ATTEMPTS = 3
DEFAULT_TASK_TIMEOUT_S = 3600.0
Transport = Literal["stdio", "http"]
OnInterrupted = Literal["report", "attention"]
_TYPES: dict[str, Transport] = {"stdio": "stdio", "http": "http", "streamable-http": "http"}
_STDIO_FIELDS = {"command", "args", "env", "cwd"}
_HTTP_FIELDS = {"url", "headers"}
_KERNEL_FIELDS = {"type", "replay", "onInterrupted", "timeoutS", "maxAttempts", "taskTimeoutS"}


class McpConfigError(ValueError):
    """The configuration cannot be used; ``server`` and ``field`` name the place."""

    def __init__(self, server: str | None, field_name: str | None, problem: str) -> None:
        where = " ".join(
            part
            for part in (
                f'server "{server}":' if server else "",
                f"{field_name}:" if field_name else "",
            )
            if part
        )
        super().__init__(f"{SETTING}: {where + ' ' if where else ''}{problem}")
        self.server = server
        self.field = field_name
        self.problem = problem


@dataclass(frozen=True, slots=True, kw_only=True)
class McpServer:
    """One configured server, secrets still as ``%NAME%`` placeholders."""

    name: str
    transport: Transport
    command: str = ""
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    url: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)
    replay: Mapping[str, ToolPolicy] = field(default_factory=dict)
    on_interrupted: OnInterrupted = "report"
    timeout_s: float = DEFAULT_TIMEOUT_S
    max_attempts: int = DEFAULT_ATTEMPTS
    task_timeout_s: float = DEFAULT_TASK_TIMEOUT_S

    def resolve(self, settings: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
        """``(env, headers)`` with every ``%NAME%`` replaced by the app setting ``NAME``; a
        missing setting raises ``McpConfigError`` naming the field (never the value)."""
        return (
            {k: self._filled(f"env.{k}", v, settings) for k, v in self.env.items()},
            {k: self._filled(f"headers.{k}", v, settings) for k, v in self.headers.items()},
        )

    def _filled(self, where: str, value: str, settings: Mapping[str, str]) -> str:
        def one(match: re.Match[str]) -> str:
            found = settings.get(match[1])
            if found is None:
                raise McpConfigError(self.name, where, f"the app setting {match[1]} is not set")
            return found

        return PLACEHOLDER.sub(one, value)

    def describe(self) -> dict[str, Any]:
        """What may be shown and stored: the transport and where, never env or header values."""
        where = self.url if self.transport == "http" else " ".join((self.command, *self.args))
        return {"name": self.name, "transport": self.transport, "where": where[:300]}


def parse(text: str) -> tuple[McpServer, ...]:
    """The servers of a configuration text (empty text: none)."""
    if not text.strip():
        return ()
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise McpConfigError(None, None, f"not valid JSON: {exc}") from exc
    if not isinstance(raw, dict) or not isinstance(raw.get("mcpServers"), dict):
        raise McpConfigError(None, "mcpServers", 'must be an object: {"mcpServers": {...}}')
    unknown = sorted(set(raw) - {"mcpServers"})
    if unknown:
        raise McpConfigError(None, unknown[0], "unknown field; only mcpServers is read")
    return tuple(_server(name, spec) for name, spec in raw["mcpServers"].items())


def _server(name: str, spec: object) -> McpServer:
    if not SERVER_NAME.fullmatch(name) or "__" in name:
        raise McpConfigError(
            name, None, "a server name is 1..24 characters of A-Z a-z 0-9 _ - without '__'"
        )
    if not isinstance(spec, dict):
        raise McpConfigError(name, None, "must be an object")
    transport = _transport(name, spec)
    allowed = _KERNEL_FIELDS | (_STDIO_FIELDS if transport == "stdio" else _HTTP_FIELDS)
    for key in spec:
        if key not in allowed:
            other = "a stdio" if transport == "http" else "an HTTP"
            why = f"belongs to {other} server" if key in _STDIO_FIELDS | _HTTP_FIELDS else ""
            raise McpConfigError(name, key, why or "unknown field")
    common: dict[str, Any] = {
        "name": name,
        "transport": transport,
        "replay": _replay(name, spec.get("replay")),
        "on_interrupted": _choice(name, "onInterrupted", spec, ("report", "attention")),
        "timeout_s": _number(name, "timeoutS", spec, DEFAULT_TIMEOUT_S),
        "max_attempts": int(_number(name, "maxAttempts", spec, DEFAULT_ATTEMPTS, whole=True)),
        "task_timeout_s": _number(name, "taskTimeoutS", spec, DEFAULT_TASK_TIMEOUT_S),
    }
    if transport == "http":
        url = spec.get("url")
        if not isinstance(url, str) or not re.match(r"https?://\S+$", url):
            raise McpConfigError(name, "url", "must be an http:// or https:// URL")
        return McpServer(url=url, headers=_strings(name, "headers", spec), **common)
    command = spec.get("command")
    if not isinstance(command, str) or not command.strip():
        raise McpConfigError(name, "command", "must be a non-empty string")
    args = spec.get("args", [])
    if not isinstance(args, list):
        raise McpConfigError(name, "args", "must be a list of strings")
    for index, arg in enumerate(args):
        if not isinstance(arg, str):
            raise McpConfigError(name, f"args[{index}]", "must be a string")
    cwd = spec.get("cwd")
    if cwd is not None and (not isinstance(cwd, str) or not cwd):
        raise McpConfigError(name, "cwd", "must be a non-empty string")
    return McpServer(
        command=command, args=tuple(args), env=_strings(name, "env", spec), cwd=cwd, **common
    )


def _transport(name: str, spec: dict[str, Any]) -> Transport:
    declared = spec.get("type")
    if declared is not None and declared not in _TYPES:
        raise McpConfigError(name, "type", f"must be one of {', '.join(_TYPES)}")
    has_url, has_command = "url" in spec, "command" in spec
    if has_url == has_command:
        raise McpConfigError(name, None, "give either command (stdio) or url (Streamable HTTP)")
    transport: Transport = "http" if has_url else "stdio"
    if declared is not None and _TYPES[declared] != transport:
        raise McpConfigError(
            name,
            "type",
            f"{declared!r} does not fit a server with a {'url' if has_url else 'command'}",
        )
    return transport


def _strings(name: str, key: str, spec: dict[str, Any]) -> dict[str, str]:
    value = spec.get(key, {})
    if not isinstance(value, dict):
        raise McpConfigError(name, key, "must be an object of strings")
    for item, text in value.items():
        if not isinstance(text, str):
            raise McpConfigError(name, f"{key}.{item}", "must be a string")
    return dict(value)


def _replay(name: str, value: object) -> dict[str, ToolPolicy]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise McpConfigError(name, "replay", 'must be an object {"<tool>": "safe"|"unsafe"}')
    for tool, policy in value.items():
        if policy not in ("safe", "unsafe"):
            raise McpConfigError(name, f"replay.{tool}", 'must be "safe" or "unsafe"')
    return dict(value)


def _choice(name: str, key: str, spec: dict[str, Any], choices: tuple[str, ...]) -> Any:
    value = spec.get(key, choices[0])
    if value not in choices:
        raise McpConfigError(name, key, f"must be one of {', '.join(choices)}")
    return value


def _number(
    name: str, key: str, spec: dict[str, Any], default: float, *, whole: bool = False
) -> float:
    value = spec.get(key, default)
    ok = isinstance(value, int | float) and not isinstance(value, bool) and 0 < value < 1e6
    if not ok or (whole and not isinstance(value, int)):
        kind = "a whole number" if whole else "a number"
        raise McpConfigError(name, key, f"must be {kind} greater than 0")
    return float(value)
