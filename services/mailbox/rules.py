"""Pure rules of the mailbox: what a valid send is, and how faults change and decide answers.

Nothing here does IO or reads a clock: functions take values (the current monotonic time is a
parameter) and return values or raise `Invalid`, so the HTTP layer stays a thin shell.

Invariants:
- `parse_send` accepts exactly the fields `to`, `subject`, `body`; anything else is `Invalid`
  naming the field, so a bad request never reaches the store.
- `SendRequest.fingerprint` is equal for equal payloads whatever their JSON key order, which is
  what lets one idempotency key be recognised as "the same request" or "a reused key".
- `Faults` is immutable; every change goes through `apply_control` or `take_failure`.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, replace
from typing import Any

MAX_KEY_CHARS = 200
MAX_BODY_BYTES = 64 * 1024
# RFC 5322 caps a header line at 998 characters; a longer subject could not be sent as-is.
MAX_SUBJECT_CHARS = 998
MAX_ADDRESS_CHARS = 254
SEND_FIELDS = ("to", "subject", "body")


class Invalid(Exception):
    """A request that breaks a rule; carries the API error code and the offending field."""

    def __init__(self, code: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.field = field


@dataclass(frozen=True, slots=True)
class SendRequest:
    operation_id: str
    to: str
    subject: str
    body: str

    @property
    def fingerprint(self) -> str:
        canonical = json.dumps([self.to, self.subject, self.body], ensure_ascii=False)
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def parse_key(raw: str | None, field: str = "Idempotency-Key") -> str:
    """Validate an operation id (1..200 printable characters)."""
    if raw is None:
        raise Invalid("missing_idempotency_key", f"{field} is required", field)
    if not 1 <= len(raw) <= MAX_KEY_CHARS or not raw.isprintable():
        raise Invalid("invalid_idempotency_key", f"{field} must be 1..200 printable chars", field)
    return raw


def is_plausible_address(text: str) -> bool:
    """One `@`, a non-empty local part, a dotted domain, no whitespace."""
    if len(text) > MAX_ADDRESS_CHARS or any(ch.isspace() for ch in text):
        return False
    local, at, domain = text.partition("@")
    if not at or not local or "@" in domain:
        return False
    labels = domain.split(".")
    return len(labels) >= 2 and all(labels)


def parse_send(key: str | None, payload: dict[str, Any]) -> SendRequest:
    operation_id = parse_key(key)
    for name in payload:
        if name not in SEND_FIELDS:
            raise Invalid("unknown_field", f"unknown field {name!r}", name)
    to, subject, body = (_string(payload, name) for name in SEND_FIELDS)
    if not is_plausible_address(to):
        raise Invalid("invalid_address", "to must be a plausible email address", "to")
    if len(subject) > MAX_SUBJECT_CHARS or "\r" in subject or "\n" in subject:
        raise Invalid("invalid_subject", "subject must be one line of at most 998 chars", "subject")
    if len(body.encode("utf-8")) > MAX_BODY_BYTES:
        raise Invalid("body_too_large", "body must be at most 64 KiB of UTF-8", "body")
    return SendRequest(operation_id, to, subject, body)


def _string(payload: dict[str, Any], name: str) -> str:
    if name not in payload:
        raise Invalid("missing_field", f"{name} is required", name)
    value = payload[name]
    if not isinstance(value, str):
        raise Invalid("invalid_type", f"{name} must be a string", name)
    return value


@dataclass(frozen=True, slots=True)
class Refusal:
    """An answer a fault imposes instead of the real one."""

    status: int
    code: str
    retry_after: int | None


@dataclass(frozen=True, slots=True)
class Faults:
    fail_next: int = 0
    fail_status: int = 503
    retry_after: int | None = None
    down_until: float = 0.0  # monotonic seconds, so wall-clock jumps cannot end an outage
    delay_ms: int = 0
    delay_after_commit: bool = False
    reject: frozenset[str] = frozenset()

    def is_rejected(self, address: str) -> bool:
        return address.lower() in self.reject

    def describe(self, now: float) -> dict[str, Any]:
        return {
            "fail_next": self.fail_next,
            "fail_status": self.fail_status,
            "retry_after": self.retry_after,
            "down_for": max(0.0, round(self.down_until - now, 3)),
            "delay_ms": self.delay_ms,
            "delay_after_commit": self.delay_after_commit,
            "reject": sorted(self.reject),
        }


CONTROL_FIELDS = frozenset(Faults().describe(0.0)) | {"reset"}


def apply_control(faults: Faults, body: dict[str, Any], now: float) -> Faults:
    """Return the faults after a control request; `reset` applies first, then the rest."""
    for name in body:
        if name not in CONTROL_FIELDS:
            raise Invalid("unknown_field", f"unknown control field {name!r}", name)
    if "reset" in body and body["reset"] is not True:
        raise Invalid("invalid_control", "reset must be true", "reset")
    new = Faults() if body.get("reset") else faults
    if "fail_next" in body:
        new = replace(
            new,
            fail_next=_int(body, "fail_next", 0, 1000),
            fail_status=_int(body, "fail_status", 400, 599, default=503),
            retry_after=_int(body, "retry_after", 0, 86400, default=None),
        )
    elif "fail_status" in body or "retry_after" in body:
        raise Invalid("invalid_control", "fail_status and retry_after need fail_next", "fail_next")
    if "down_for" in body:
        seconds = _number(body, "down_for", 0, 3600)
        new = replace(new, down_until=now + seconds if seconds else 0.0)
    if "delay_ms" in body:
        new = replace(new, delay_ms=_int(body, "delay_ms", 0, 60000))
    if "delay_after_commit" in body:
        new = replace(new, delay_after_commit=_bool(body, "delay_after_commit"))
    if "reject" in body:
        new = replace(new, reject=_addresses(body, "reject"))
    return new


def down_refusal(faults: Faults, now: float) -> Refusal | None:
    if now >= faults.down_until:
        return None
    return Refusal(503, "unavailable", math.ceil(faults.down_until - now))


def take_failure(faults: Faults) -> tuple[Faults, Refusal | None]:
    """Consume one injected failure, if any is pending."""
    if faults.fail_next <= 0:
        return faults, None
    refusal = Refusal(faults.fail_status, "injected_failure", faults.retry_after)
    return replace(faults, fail_next=faults.fail_next - 1), refusal


_MISSING: Any = object()


def _int(body: dict[str, Any], name: str, lo: int, hi: int, default: Any = _MISSING) -> Any:
    value = body.get(name, default)
    if value is default and default is not _MISSING:
        return default
    # bool is an int subclass; `true` is never a count
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise Invalid("invalid_control", f"{name} must be an integer in {lo}..{hi}", name)
    return value


def _number(body: dict[str, Any], name: str, lo: float, hi: float) -> float:
    value = body[name]
    if not isinstance(value, int | float) or isinstance(value, bool) or not lo <= value <= hi:
        raise Invalid("invalid_control", f"{name} must be a number in {lo}..{hi}", name)
    return float(value)


def _bool(body: dict[str, Any], name: str) -> bool:
    if not isinstance(body[name], bool):
        raise Invalid("invalid_control", f"{name} must be true or false", name)
    return bool(body[name])


def _addresses(body: dict[str, Any], name: str) -> frozenset[str]:
    value = body[name]
    if not isinstance(value, list) or not all(
        isinstance(item, str) and is_plausible_address(item) for item in value
    ):
        raise Invalid("invalid_control", f"{name} must be a list of email addresses", name)
    return frozenset(item.lower() for item in value)
