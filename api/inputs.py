"""What the HTTP API accepts: parsing and validation of bodies, queries and route ids. Pure.

Every function returns clean values or raises a ``kernel.common.errors.ValidationError`` whose
``field`` names the offending part of the request (``requestId``, ``text``, ``after``,
``wait``, ``limit``, ``body``, ``sessionId``, ``submissionId``), so the handler answers 400 with
``{"error", "message", "field"}`` before anything is stored.

Every string of a JSON body (keys included) and every free-form route id must be valid Unicode:
a lone surrogate (``"\\ud800"`` is valid JSON) is refused as ``invalid_unicode`` naming the
field (``kernel.common.text``), never replaced: a replaced ``requestId`` could collide with another
request's, and a replaced text is not what the client sent.

Limits (documented in docs/api.md and docs/openapi.yaml):
* a submission body is a JSON object of at most ``MAX_BODY_BYTES`` with exactly the keys
  ``requestId`` (1..128 printable characters) and ``text`` (1..32,000 characters, not only
  whitespace);
* an operator or approval body (``decision``) is a JSON object with exactly ``requestId`` and
  the decision field, whose value is one of the allowed ones;
* ``after`` is a non-negative integer; ``wait`` a number of seconds >= 0, capped at
  ``MAX_WAIT_SECONDS``; ``limit`` an integer in 1..``MAX_LIMIT``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kernel.common import ids
from kernel.common.errors import ValidationError
from kernel.common.text import require_unicode
from kernel.session.requests import MAX_TEXT_CHARS

MAX_JSON_DEPTH = 64  # as the host bounds durable inputs (the extension's JSON library default)
MAX_BODY_BYTES = 256 * 1024
MAX_WAIT_SECONDS = 60.0
MAX_LIMIT = 1_000
SUBMISSION_KEYS = ("requestId", "text")
_INTEGER = re.compile(r"^[0-9]{1,18}$")


@dataclass(frozen=True)
class Submission:
    request_id: str
    text: str
    # What a run of this submission may use besides its text: the tools it may call and its
    # own turn policy (``kernel.loops.loop.run_options``; a loop's runs carry them). Empty: the
    # whole catalogue and the app's settings, as for any HTTP submission.
    options: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclass(frozen=True)
class ChangesQuery:
    after: int
    wait: float
    limit: int | None


def session_id(value: object) -> str:
    return ids.validate_session_id(value, "sessionId")


def instance_id(value: object, field: str) -> str:
    """A route id that names an orchestration instance (a tool task)."""
    return ids.validate_instance_id(require_unicode(value, field), field)


def unicode_strings(value: Any, field: str) -> Any:
    """``value`` as given once every string in it, object keys included, is valid Unicode.

    ``field`` is the path reported for a bad string: a top-level key names itself, deeper ones
    get their path (``items[2].name``)."""
    pending: list[tuple[Any, str]] = [(value, field)]
    while pending:
        item, path = pending.pop()
        if isinstance(item, dict):
            for key, child in item.items():
                require_unicode(key, path)
                pending.append((child, key if path == "body" else f"{path}.{key}"))
        elif isinstance(item, list):
            pending.extend((child, f"{path}[{i}]") for i, child in enumerate(item))
        else:
            require_unicode(item, path)
    return value


def submission_id(value: object) -> str:
    try:
        return ids.validate_key(value, "submissionId")
    except ValidationError as exc:
        raise ValidationError("invalid_submission_id", exc.message, "submissionId") from exc


def too_deep(text: str, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether JSON ``text`` nests deeper than ``limit``, counted without recursion (a deep
    body must be a 400, never a RecursionError in the parser or in a walk over its value)."""
    depth, in_string, escaped = 0, False, False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > limit:
                return True
        elif char in "]}":
            depth -= 1
    return False


def parse_json(raw: bytes, field: str | None) -> Any:
    """The body as JSON, refused with a named 400 when it is not UTF-8 JSON or nests deeper
    than ``MAX_JSON_DEPTH``."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValidationError("invalid_json", "the body is not valid UTF-8 JSON", field) from exc
    if too_deep(text):
        raise ValidationError(
            "invalid_json", f"the body nests deeper than {MAX_JSON_DEPTH} levels", field
        )
    try:
        return json.loads(text) if text.strip() else None
    except ValueError as exc:
        raise ValidationError("invalid_json", "the body is not valid UTF-8 JSON", field) from exc


def json_object(raw: bytes) -> dict[str, Any]:
    if len(raw) > MAX_BODY_BYTES:
        raise ValidationError("body_too_large", f"the body exceeds {MAX_BODY_BYTES} bytes", "body")
    body = parse_json(raw, "body")
    if not isinstance(body, dict):
        raise ValidationError("invalid_body", "the body must be a JSON object", "body")
    return unicode_strings(body, "body")


def status_object(value: object) -> dict[str, Any]:
    """An instance's status field (custom status, input) as an object: the SDK hands JSON text
    or a value; anything that is not a JSON object reads as ``{}``."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    return value if isinstance(value, dict) else {}


def decision(raw: bytes, field: str, allowed: tuple[str, ...]) -> tuple[str, str]:
    """``(requestId, value)`` of an operator or approval body ``{"requestId", field}``."""
    if len(raw) > MAX_BODY_BYTES:
        raise ValidationError("body_too_large", f"the body exceeds {MAX_BODY_BYTES} bytes", "body")
    body = parse_json(raw, None)
    if not isinstance(body, dict):
        raise ValidationError("invalid_body", "the request body must be a JSON object", None)
    unicode_strings(body, "body")
    unknown = sorted(set(body) - {"requestId", field})
    if unknown:
        raise ValidationError("invalid_body", f"unknown field {unknown[0]!r}", unknown[0])
    request_id = ids.validate_request_id(body.get("requestId"), "requestId")
    value = body.get(field)
    if value not in allowed:
        raise ValidationError(
            f"invalid_{field}", f"{field} must be one of {', '.join(allowed)}", field
        )
    return request_id, value


def submission(raw: bytes) -> Submission:
    body = json_object(raw)
    for key in body:
        if key not in SUBMISSION_KEYS:
            raise ValidationError("unknown_field", f"unknown field {key!r}", key)
    for key in SUBMISSION_KEYS:
        if key not in body or body[key] is None:
            raise ValidationError("missing_field", f"{key} is required", key)
    request_id = ids.validate_request_id(body["requestId"], "requestId")
    return Submission(request_id, _text(body["text"]))


def _text(text: object) -> str:
    if not isinstance(text, str):
        raise ValidationError("invalid_text", "text must be a string", "text")
    if not text.strip():
        raise ValidationError("empty_text", "text must not be empty or only whitespace", "text")
    if len(text) > MAX_TEXT_CHARS:
        raise ValidationError(
            "text_too_long", f"text is longer than {MAX_TEXT_CHARS} characters", "text"
        )
    return text


def changes_query(params: Mapping[str, str]) -> ChangesQuery:
    after = params.get("after")
    if after is None or not _INTEGER.match(after):
        raise ValidationError("invalid_cursor", "after must be an integer >= 0", "after")
    return ChangesQuery(int(after), _wait(params.get("wait")), _limit(params.get("limit")))


def entries_query(params: Mapping[str, str]) -> tuple[int, int | None]:
    """``after`` (required, integer >= 0) and ``limit`` (1..1,000) of the paged entries API."""
    after = params.get("after")
    if after is None or not _INTEGER.match(after):
        raise ValidationError("invalid_cursor", "after must be an integer >= 0", "after")
    return int(after), _limit(params.get("limit"))


def _wait(text: str | None) -> float:
    if text is None or text == "":
        return 0.0
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not math.isfinite(value) or value < 0:
        raise ValidationError("invalid_wait", "wait must be a number of seconds >= 0", "wait")
    return min(value, MAX_WAIT_SECONDS)


def _limit(text: str | None) -> int | None:
    if text is None or text == "":
        return None
    if not _INTEGER.match(text) or not 1 <= int(text) <= MAX_LIMIT:
        raise ValidationError(
            "invalid_limit", f"limit must be an integer in 1..{MAX_LIMIT}", "limit"
        )
    return int(text)
