"""The deterministic offline planner: a stand-in model used when no endpoint is configured.

``plan(entries)`` reads session entries (``{n, role, kind, text, data}``) and returns the
``ModelResponse`` a model would. Pure and deterministic: equal entries give an equal response
(same text, same tool-call ids, same token counts), so demos and tests run with no network.

What it reads: the latest ``user`` entry, and the ``tool`` entries after it (matched to planned
calls by ``data.tool_call_id``). Everything before the latest user entry only counts towards
prompt tokens.

Rules, applied to each clause of the user text (clauses are separated by `` and then ``,
case-insensitive; trailing ``.``, ``!`` and ``?`` are dropped), first match wins:

1. ``send ...`` naming one or more e-mail addresses anywhere → ``send_notices`` with
   ``recipients`` (in order, verbatim: duplicates are left for the tool to reject),
   ``subject`` (from ``subject "..."``, default ``Notice``), ``body`` (from ``body "..."``,
   default ``DEFAULT_BODY``) and ``policy`` (``failFast`` if the text says ``fail fast``, else
   ``allSettled``);
2. ``delete document <title>`` → ``delete_document`` (a tool that requires approval);
3. ``remember <title>: <text>`` → ``write_document``;
4. ``recall <title>`` → ``read_document``;
5. ``record <text> in the ledger`` or ``ledger: <text>`` → ``append_ledger``;
6. ``calculate <expr>`` or ``compute <expr>``, and ``what is <expr>`` when ``<expr>`` is made of
   digits and operators only → ``calculator``;
7. ``run python: <code>`` → ``run_python``; ``write file <path>: <text>`` → ``write_file``;
   ``show file <path>`` → ``read_file``; ``list files`` → ``list_files`` (checked first; the
   code and the text may span lines);
8. ``call <tool> with <JSON object>`` (checked first) → that tool with those arguments, for
   any name: a built-in tool or an MCP tool (``mcp__<server>__<tool>``); an unknown name is
   left for the tool task to refuse. Its answer line is ``<tool>: <the result's text>``;
9. anything else needs no tool: it is answered directly with an echo and a word count.

Rounds: every tool clause gets one round of its own, in order. Each call to ``plan`` finds the
first tool clause without a result and asks for its call; when every tool clause has a result,
the response is the final answer, one part per clause in order (for ``send_notices``, one line
per recipient with its outcome). A text with no tool clause is answered at once.

Tool-call ids are ``call_{n}_{round}_{index}``: ``n`` is the user entry's number (its position
when it has none), ``round`` the 1-based tool clause, ``index`` the call within the round
(always 0: one call per round). Usage is an estimate, ``ceil(words * 4 / 3)`` over every entry's
text (prompt) and over the answer or the call arguments (completion), so token budgets can be
tested.

Tool results are read from ``data.result`` when present, else from ``text`` (parsed as JSON when
it is JSON). A result that is ``{"ok": false, ...}`` (or an entry with ``data.ok == false``) is a
failure and is reported with its ``kind`` and ``message``. ``send_notices`` results are expected
as ``{"results": [{"recipient", "outcome", "detail"?}]}``; they are listed per recipient even
when the send as a whole failed (some recipients not confirmed).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import cast

from kernel.turn import calculator
from kernel.turn.model_io import JsonObject, JsonValue, ModelResponse, ToolCall, Usage

MODEL_NAME = "offline-planner"
DEFAULT_SUBJECT = "Notice"
DEFAULT_BODY = "Please read the approved notice."

Entry = Mapping[str, object]
_NOTHING: Mapping[str, object] = {}

_CLAUSE_SEPARATOR = re.compile(r"\s+and\s+then\s+", re.IGNORECASE)
_EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+")
_QUOTED = re.compile(r'"[^"]*"')
_ARITHMETIC = re.compile(r"[\d\s+\-*/%().]*\d[\d\s+\-*/%().]*")
# ``call <tool> with <JSON object>``: any catalogued tool, MCP tools included (docs/tools.md).
_CALL = re.compile(
    r"call\s+(?P<tool>[A-Za-z0-9_-]{1,64})\s+with\s+(?P<arguments>\{.*\})",
    re.IGNORECASE | re.DOTALL,
)
_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    # The workspace (docs/workspace.md): code and file text may span lines.
    ("run_python", re.compile(r"run python\s*:\s*(?P<code>.+)", re.IGNORECASE | re.DOTALL)),
    (
        "write_file",
        re.compile(r"write file\s+(?P<path>[^:\s]+)\s*:\s*(?P<text>.*)", re.IGNORECASE | re.DOTALL),
    ),
    ("read_file", re.compile(r"show file\s+(?P<path>\S+)", re.IGNORECASE)),
    ("list_files", re.compile(r"list files", re.IGNORECASE)),
    ("delete_document", re.compile(r"delete (?:the )?document\s+(?P<title>.+)", re.IGNORECASE)),
    (
        "write_document",
        re.compile(r"remember\s+(?P<title>[^:]+?)\s*:\s*(?P<text>.*)", re.IGNORECASE),
    ),
    ("read_document", re.compile(r"recall\s+(?P<title>.+)", re.IGNORECASE)),
    ("append_ledger", re.compile(r"record\s+(?P<text>.+?)\s+in the ledger", re.IGNORECASE)),
    ("append_ledger", re.compile(r"ledger\s*:\s*(?P<text>.+)", re.IGNORECASE)),
    ("calculator", re.compile(r"(?:calculate|compute)\s+(?P<expression>.+)", re.IGNORECASE)),
)


@dataclass(frozen=True, slots=True)
class _Step:
    """One clause of the user text and the tool call it needs (``tool`` None: no tool)."""

    clause: str
    tool: str | None
    arguments: JsonObject


def estimate_tokens(text: str) -> int:
    """The planner's token estimate for ``text``: ``ceil(words * 4 / 3)``."""
    return (len(text.split()) * 4 + 2) // 3


def plan(entries: Sequence[Entry]) -> ModelResponse:
    """The next response for a turn whose transcript is ``entries``."""
    position = _latest_user(entries)
    if position is None:
        return _answer("There is no question to answer yet.", entries)
    user = entries[position]
    number = user.get("n")
    turn = number if isinstance(number, int) else position
    steps = [_classify(clause) for clause in _clauses(_text(user))]
    results = _results_by_call_id(entries[position + 1 :])
    calls = [(step.tool, step.arguments) for step in steps if step.tool is not None]
    for round_no, (tool, arguments) in enumerate(calls, start=1):
        call_id = _call_id(turn, round_no)
        if call_id not in results:
            return _call(ToolCall(call_id, tool, arguments), entries)
    return _answer(_summary(steps, results, turn), entries)


def _call_id(turn: int, round_no: int, index: int = 0) -> str:
    # Derived from the transcript alone, so a replayed or recovered turn plans the same ids.
    return f"call_{turn}_{round_no}_{index}"


def _latest_user(entries: Sequence[Entry]) -> int | None:
    for position in range(len(entries) - 1, -1, -1):
        if entries[position].get("role") == "user":
            return position
    return None


def _clauses(text: str) -> list[str]:
    parts = (part.strip().rstrip(".!?").strip() for part in _CLAUSE_SEPARATOR.split(text))
    return [part for part in parts if part] or [""]


def _classify(clause: str) -> _Step:
    if explicit := _CALL.fullmatch(clause):
        try:
            given = json.loads(explicit["arguments"])
        except ValueError:
            given = None
        if isinstance(given, dict):
            return _Step(clause, explicit["tool"], given)
    if re.match(r"send\b", clause, re.IGNORECASE) and _EMAIL.search(_QUOTED.sub(" ", clause)):
        return _Step(clause, "send_notices", _notice_arguments(clause))
    for tool, pattern in _PATTERNS:
        if match := pattern.fullmatch(clause):
            arguments: JsonObject = {k: _unquote(v) for k, v in match.groupdict().items()}
            return _Step(clause, tool, arguments)
    what_is = re.fullmatch(r"what(?:'s| is)\s+(?P<expression>.+)", clause, re.IGNORECASE)
    if what_is and _ARITHMETIC.fullmatch(what_is["expression"]):
        return _Step(clause, "calculator", {"expression": what_is["expression"].strip()})
    return _Step(clause, None, {})


def _notice_arguments(clause: str) -> JsonObject:
    subject = re.search(r'subject\s+"([^"]*)"', clause, re.IGNORECASE)
    body = re.search(r'body\s+"([^"]*)"', clause, re.IGNORECASE)
    # Quoted parts are subject or body text, so an address inside them is not a recipient.
    recipients: list[JsonValue] = list(_EMAIL.findall(_QUOTED.sub(" ", clause)))
    fail_fast = re.search(r"\bfail[\s-]?fast\b", clause, re.IGNORECASE)
    return {
        "recipients": recipients,
        "subject": subject[1] if subject else DEFAULT_SUBJECT,
        "body": body[1] if body else DEFAULT_BODY,
        "policy": "failFast" if fail_fast else "allSettled",
    }


def _unquote(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


def _call(call: ToolCall, entries: Sequence[Entry]) -> ModelResponse:
    completion = estimate_tokens(json.dumps(call.arguments, sort_keys=True))
    return ModelResponse(
        content=None,
        tool_calls=(call,),
        usage=Usage(_prompt_tokens(entries), completion),
        finish_reason="tool_calls",
        model=MODEL_NAME,
    )


def _answer(text: str, entries: Sequence[Entry]) -> ModelResponse:
    return ModelResponse(
        content=text,
        usage=Usage(_prompt_tokens(entries), estimate_tokens(text)),
        finish_reason="stop",
        model=MODEL_NAME,
    )


def _prompt_tokens(entries: Sequence[Entry]) -> int:
    return sum(estimate_tokens(_text(entry)) for entry in entries)


def _text(entry: Entry) -> str:
    text = entry.get("text")
    return text if isinstance(text, str) else ""


def _results_by_call_id(entries: Sequence[Entry]) -> dict[str, Entry]:
    results: dict[str, Entry] = {}
    for entry in entries:
        call_id = _mapping(entry.get("data")).get("tool_call_id")
        if entry.get("role") == "tool" and isinstance(call_id, str):
            results[call_id] = entry
    return results


def _mapping(value: object) -> Mapping[str, object]:
    return cast(Mapping[str, object], value) if isinstance(value, Mapping) else _NOTHING


def _summary(steps: list[_Step], results: Mapping[str, Entry], turn: int) -> str:
    lines: list[str] = []
    round_no = 0
    for step in steps:
        if step.tool is None:
            lines.append(_echo(step.clause))
            continue
        round_no += 1
        outcome = _Outcome.of(results[_call_id(turn, round_no)])
        if outcome.ok:
            shown = _SUCCESS.get(step.tool)
            lines.extend(
                shown(step.arguments, outcome.payload)
                if shown
                else [f"{step.tool}: {_tool_text(outcome.payload)}"]
            )
            continue
        lines.append(f"{step.tool} did not complete ({outcome.kind}): {outcome.message}")
        if step.tool == "send_notices" and isinstance(_field(outcome.payload, "results"), list):
            # A partly failed send still reports every recipient: the user must see which
            # notices went out and which did not.
            lines.extend(_notices(step.arguments, outcome.payload)[1:])
    return "\n".join(lines)


def _echo(clause: str) -> str:
    words = len(clause.split())
    return f'You said: "{clause}" ({words} word{"" if words == 1 else "s"}).'


@dataclass(frozen=True, slots=True)
class _Outcome:
    """A committed tool result, read leniently: the result entry format is the tool's."""

    ok: bool
    payload: JsonValue
    kind: str
    message: str

    @classmethod
    def of(cls, entry: Entry) -> _Outcome:
        data = _mapping(entry.get("data"))
        text = _text(entry)
        payload = cast(JsonValue, data["result"]) if "result" in data else _maybe_json(text)
        fields = _mapping(payload)
        failed = data.get("ok") is False or fields.get("ok") is False
        kind = fields.get("kind", data.get("kind", "error"))
        message = fields.get("message", data.get("message", text))
        return cls(not failed, payload, str(kind), str(message))


def _maybe_json(text: str) -> JsonValue:
    try:
        return cast(JsonValue, json.loads(text))
    except ValueError:
        return text


def _field(payload: JsonValue, key: str) -> JsonValue:
    return payload.get(key, payload) if isinstance(payload, dict) else payload


def _shown(value: JsonValue) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return calculator.format_number(value)
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def _tool_text(payload: JsonValue) -> str:
    """Any other tool's result: its text content (an MCP result), else the result as JSON."""
    items = _field(payload, "content")
    if isinstance(items, list):
        texts = [
            str(item["text"])
            for item in items
            if isinstance(item, dict) and item.get("type") == "text" and "text" in item
        ]
        if texts:
            return " ".join(" ".join(texts).split())[:2000]
    return _shown(payload)[:2000]


def _calculated(args: JsonObject, payload: JsonValue) -> list[str]:
    return [f"{args['expression']} = {_shown(_field(payload, 'value'))}"]


def _notices(args: JsonObject, payload: JsonValue) -> list[str]:
    reported = _field(payload, "results")
    outcomes: dict[str, str] = {}
    for item in reported if isinstance(reported, list) else []:
        if isinstance(item, dict) and isinstance(item.get("recipient"), str):
            detail = item.get("detail")
            suffix = f" ({detail})" if detail else ""
            outcomes[str(item["recipient"]).lower()] = f"{item.get('outcome', 'unknown')}{suffix}"
    recipients = [str(r) for r in cast(list[JsonValue], args["recipients"])]
    lines = [f'Notice "{args["subject"]}" to {len(recipients)} recipient(s):']
    for recipient in recipients:
        lines.append(f"- {recipient}: {outcomes.get(recipient.lower(), 'no outcome reported')}")
    return lines


def _listed(payload: JsonValue) -> list[str]:
    files = _field(payload, "files")
    if not isinstance(files, list) or not files:
        return ["The workspace has no files."]
    lines = [f"{len(files)} file(s) in the workspace:"]
    for item in files:
        if isinstance(item, dict):
            lines.append(f"- {item.get('path')} ({_shown(item.get('size'))} bytes)")
    return lines


def _python(payload: JsonValue) -> list[str]:
    output = _field(payload, "stdout")
    text = output.rstrip() if isinstance(output, str) else ""
    return [f"Python printed: {text}"] if text else ["Python ran and printed nothing."]


_SUCCESS: dict[str, Callable[[JsonObject, JsonValue], list[str]]] = {
    "calculator": _calculated,
    "write_document": lambda args, _: [f'Saved note "{args["title"]}".'],
    "read_document": lambda args, p: [f'Note "{args["title"]}": {_shown(_field(p, "text"))}'],
    "delete_document": lambda args, _: [f'Deleted document "{args["title"]}".'],
    "append_ledger": lambda args, _: [f"Recorded in the ledger: {args['text']}"],
    "send_notices": _notices,
    "write_file": lambda args, p: [
        f"Wrote file {args['path']} ({_shown(_field(p, 'size'))} bytes)."
    ],
    "read_file": lambda args, p: [f"File {args['path']}:", _shown(_field(p, "text"))],
    "list_files": lambda args, p: _listed(p),
    "run_python": lambda args, p: _python(p),
}
