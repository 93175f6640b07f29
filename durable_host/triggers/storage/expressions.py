"""Binding expressions in paths, queue and table names and keys, as the Functions host resolves them.

Pure (the clock and the id source are arguments). Three kinds, in this order:

* ``%Name%`` - an app setting, resolved once at start-up (``resolve_settings``); an unset one
  refuses the start, naming the function, the binding and the setting.
* ``{rand-guid}`` - a new GUID per expression; ``{DateTime}`` - the invocation's UTC time as
  ``yyyy-MM-ddTHH-mm-ssZ`` (the WebJobs SDK's system binding data; case-insensitive).
* ``{name}`` or ``{a.b.c}`` - the trigger's binding data (case-insensitive, as the SDK's binding
  data is): HTTP route parameters, ``Query``, ``Headers`` and a JSON body's properties; a queue
  message's JSON properties and its metadata (``Id``, ``DequeueCount``...); a blob path's
  captures (``{name}`` of ``samples/{name}.txt``); an activity input's properties. A dotted
  name walks into nested objects, which is also the hook of other triggers: the MCP trigger
  passes ``mcptoolargs`` (its arguments as text), ``mcptoolcontext`` and ``mcpsessionid``
  (``triggers/mcp/calls``), so ``{mcptoolargs.<name>}`` resolves here unchanged. A name
  with no value fails the invocation with the SDK's text ``No value for named parameter
  '<name>'.``

``pattern`` compiles a blob-trigger path (``container/{name}.txt``) to a matcher whose groups
are the captures. A capture may span virtual folders (``samples/{name}.txt`` matches
``samples/a/b.txt`` with ``name`` = ``a/b``); one before a literal is the shortest that fits,
the last one takes the rest of the name.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

_SETTING = re.compile(r"%([^%]+)%")
_TOKEN = re.compile(r"\{([^{}]+)\}")


class ExpressionError(ValueError):
    """An expression that cannot be resolved; the message is the invocation's failure."""


def settings_used(text: str) -> list[str]:
    return _SETTING.findall(text)


def resolve_settings(text: str, settings: Mapping[str, str]) -> str:
    """``text`` with each ``%Name%`` replaced; ``KeyError(name)`` for an unset setting."""

    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        value = settings.get(name)
        if value is None:
            raise KeyError(name)
        return value

    return _SETTING.sub(one, text)


def tokens(text: str) -> list[str]:
    return _TOKEN.findall(text)


def lookup(data: Mapping[str, Any], name: str) -> Any:
    """The value of a (dotted) binding-data name, case-insensitively; KeyError if none."""
    current: Any = data
    for part in name.split("."):
        if not isinstance(current, Mapping):
            raise KeyError(name)
        if part in current:
            current = current[part]
            continue
        lowered = {str(k).lower(): v for k, v in current.items()}
        if part.lower() not in lowered:
            raise KeyError(name)
        current = lowered[part.lower()]
    return current


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "True" if value else "False"  # .NET's Boolean.ToString
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def resolve(
    text: str,
    data: Mapping[str, Any],
    *,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
    new_id: Callable[[], str] = lambda: str(uuid.uuid4()),
) -> str:
    """``text`` with every ``{...}`` token resolved (settings were resolved at start-up)."""

    def one(match: re.Match[str]) -> str:
        name = match.group(1).strip()
        low = name.lower()
        if low == "rand-guid":
            return new_id()
        if low == "datetime":
            return now().astimezone(UTC).strftime("%Y-%m-%dT%H-%M-%SZ")
        try:
            value = lookup(data, name)
        except KeyError:
            raise ExpressionError(f"No value for named parameter '{name}'.") from None
        if value is None or isinstance(value, (dict, list)):
            raise ExpressionError(f"No value for named parameter '{name}'.")
        return _text(value)

    return _TOKEN.sub(one, text)


def pattern(path: str) -> re.Pattern[str]:
    """A blob-trigger path's blob part (after the container) as a regex with named groups."""
    out, names = "", set()
    pieces = re.split(r"(\{[^{}]+\})", path)
    for i, piece in enumerate(pieces):
        if not (piece.startswith("{") and piece.endswith("}")):
            out += re.escape(piece)
            continue
        name = piece[1:-1].strip()
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) or name in names:
            raise ValueError(f"{piece} is not a usable capture in a blob path")
        names.add(name)
        last = all(not p for p in pieces[i + 1 :])
        out += f"(?P<{name}>.+)" if last else f"(?P<{name}>.+?)"
    return re.compile(f"^{out}$")


def literal_prefix(path: str) -> str:
    """The part of a blob path before its first capture (the listing's prefix)."""
    return path.split("{", 1)[0]
