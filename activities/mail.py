"""Mail client activities: ``send_mail`` (one notice, keyed by its operation id) and ``query_mail``.

Both speak the protocol of ``services/mailbox`` (``POST /messages`` with an ``Idempotency-Key``
header, ``GET /messages?operationId=``), configured by app settings:

* ``AGENT_MAIL_BASE_URL`` - the service, e.g. ``https://mail.internal.example``; required.
* ``AGENT_MAIL_API_KEY``  - sent as ``Authorization: Bearer ...`` when set; never logged or
  returned.
* ``AGENT_MAIL_TIMEOUT_S`` - seconds to wait for an answer (default 10).

Both return an envelope and never raise for an expected failure, because exception types do
not survive the activity boundary::

    {"ok", "kind", "code", "receipt", "retry_after", "message", "maybe_sent"}

``kind`` says what the caller may conclude:

* ``accepted``  - the service holds the message; ``receipt`` is
  ``{message_id, operation_id, to, accepted_at, replayed, source}``.
* ``rejected``  - a definite no that repeating the request will not change (``code``:
  ``recipient_rejected``, ``idempotency_key_reused``, ``body_not_found``, ...); for
  ``query_mail``, ``not_found``: the service never accepted this operation id.
* ``transient`` - no verdict yet (429, 503, connection refused): trying again later is safe.
  ``retry_after`` is the service's hint in seconds.
* ``unknown``   - no verdict, and the request may have taken effect (a timeout after sending,
  a dropped connection, 500/502/504): only a query can tell.

``maybe_sent`` is true when a send was issued and its effect is not known (every ``unknown``,
and a 503, which a gateway may answer for a service that did the work); a caller must verify
such a send before it calls it cancelled or failed.

``send_mail`` reads the body itself from its reference (a ``note`` document of the session, or
stored content), so orchestration histories carry the reference only.

``send_mail`` looks the operation id up before it sends. An activity runs at least once: when
the host dies after the service accepted a mail but before the result was recorded, the
activity runs again, and this look-up turns that second run into a verification (``source``
``lookup``) instead of a second send. It does not depend on how long the service remembers
idempotency keys (minutes to a day, or not at all); the key still protects two executions
that race between look-up and send.
"""

from __future__ import annotations

import asyncio
import email.utils
import http.client
import json
import os
import socket
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import azure.durable_functions as df

from adapters.content_store import ContentNotFound, default_store
from entities import session_pages
from kernel.common.content import is_content_ref
from kernel.session.state import decode_entity_state

bp = df.Blueprint()
DEFAULT_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class MailConfig:
    base_url: str
    api_key: str | None
    timeout: float

    @classmethod
    def from_env(cls) -> MailConfig | None:
        base = os.environ.get("AGENT_MAIL_BASE_URL", "").strip().rstrip("/")
        if not base:
            return None
        try:
            timeout = float(os.environ.get("AGENT_MAIL_TIMEOUT_S", DEFAULT_TIMEOUT_S))
        except ValueError:
            timeout = DEFAULT_TIMEOUT_S
        return cls(base, os.environ.get("AGENT_MAIL_API_KEY") or None, max(timeout, 0.1))


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    body: dict[str, Any]
    retry_after: float | None


class NoAnswer(Exception):
    """The exchange ended without an HTTP answer; ``kind`` is transient or unknown."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


def envelope(
    kind: str,
    *,
    code: str | None = None,
    receipt: dict[str, Any] | None = None,
    retry_after: float | None = None,
    message: str | None = None,
    maybe_sent: bool = False,
) -> dict[str, Any]:
    return {
        "ok": kind == "accepted",
        "kind": kind,
        "code": code,
        "receipt": receipt,
        "retry_after": retry_after,
        "message": message,
        "maybe_sent": maybe_sent,
    }


def receipt_of(message: dict[str, Any], source: str) -> dict[str, Any]:
    return {
        "message_id": message.get("messageId"),
        "operation_id": message.get("operationId"),
        "to": message.get("to"),
        "accepted_at": message.get("acceptedAt"),
        "replayed": bool(message.get("replayed", False)),
        "source": source,
    }


def classify_send(answer: Answer) -> dict[str, Any]:
    """What an HTTP answer to ``POST /messages`` lets the caller conclude."""
    status, body = answer.status, answer.body
    code = str(body.get("error") or f"http_{status}")
    message = str(body.get("message") or f"HTTP {status}")
    if status in (200, 201) and body.get("messageId"):
        return envelope("accepted", receipt=receipt_of(body, "send"))
    if status in (429, 503):
        # 429 proves the request was not processed; a 503 may come from a gateway in front
        # of a service that did process it, so only a query can settle that.
        return envelope(
            "transient",
            code=code,
            retry_after=answer.retry_after,
            message=message,
            maybe_sent=status == 503,
        )
    if status == 408 or status >= 500 or status < 400:
        return envelope(
            "unknown", code=code, retry_after=answer.retry_after, message=message, maybe_sent=True
        )
    return envelope("rejected", code=code, message=message)


def classify_query(answer: Answer) -> dict[str, Any]:
    """What an HTTP answer to ``GET /messages?operationId=`` lets the caller conclude."""
    body = answer.body
    if answer.status == 200 and body.get("found") is True and isinstance(body.get("message"), dict):
        return envelope("accepted", receipt=receipt_of(body["message"], "confirm"))
    if answer.status == 200 and body.get("found") is False:
        return envelope(
            "rejected", code="not_found", message="the service never accepted this operation id"
        )
    kind = "transient" if answer.status in (429, 503) else "unknown"
    return envelope(
        kind,
        code=str(body.get("error") or f"http_{answer.status}"),
        retry_after=answer.retry_after,
        message=str(body.get("message") or f"HTTP {answer.status}"),
    )


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """``Retry-After`` as seconds: a number, or an HTTP date relative to ``now``."""
    if not value:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max((when - (now or datetime.now(UTC))).total_seconds(), 0.0)


def exchange(
    config: MailConfig,
    method: str,
    path: str,
    payload: Any = None,
    headers: dict[str, str] | None = None,
) -> Answer:
    """One HTTP request (blocking); raises ``NoAnswer`` when no answer came."""
    data = json.dumps(payload).encode() if payload is not None else None
    all_headers = {"Accept": "application/json", **(headers or {})}
    if data is not None:
        all_headers["Content-Type"] = "application/json"
    if config.api_key:
        all_headers["Authorization"] = f"Bearer {config.api_key}"
    request = urllib.request.Request(config.base_url + path, data, all_headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=config.timeout) as response:
            return Answer(
                response.status,
                _json(response.read()),
                parse_retry_after(response.headers.get("Retry-After")),
            )
    except urllib.error.HTTPError as err:
        return Answer(
            err.code, _json(err.read()), parse_retry_after(err.headers.get("Retry-After"))
        )
    except urllib.error.URLError as err:
        raise _no_answer(err.reason) from err
    except (OSError, http.client.HTTPException) as err:
        raise _no_answer(err) from err


def _no_answer(reason: object) -> NoAnswer:
    # Only a refused connection or a failed name lookup proves the request never arrived.
    if isinstance(reason, ConnectionRefusedError | socket.gaierror):
        return NoAnswer("transient", f"mail service unreachable: {reason}")
    if isinstance(reason, TimeoutError):
        return NoAnswer("unknown", "no answer from the mail service in time")
    return NoAnswer("unknown", f"the exchange with the mail service broke off: {reason}")


def _json(raw: bytes) -> dict[str, Any]:
    try:
        value = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


async def load_body(client: df.DurableOrchestrationClient, session_id: str, ref: str) -> str | None:
    """The text behind a body reference: stored content, or a ``note`` document's text."""
    if is_content_ref(ref):
        try:
            return await asyncio.to_thread(default_store().get, ref)
        except ContentNotFound:
            return None
    state = await read_session(client, session_id)
    document = session_pages.document(state, ref)
    if not document or document.get("type") != "note" or document.get("deleted"):
        return None
    return str(document["data"]["text"])


async def read_session(
    client: df.DurableOrchestrationClient, session_id: str
) -> dict[str, Any] | None:
    return decode_entity_state(await client.read_entity_state(df.EntityId("session", session_id)))


async def lookup(config: MailConfig, operation_id: str) -> dict[str, Any]:
    query = urllib.parse.urlencode({"operationId": operation_id})
    try:
        answer = await asyncio.to_thread(exchange, config, "GET", f"/messages?{query}")
    except NoAnswer as exc:
        return envelope(exc.kind, code="no_answer", message=exc.message)
    return classify_query(answer)


async def post(config: MailConfig, job: dict[str, Any], body: str) -> dict[str, Any]:
    payload = {"to": job["to"], "subject": job["subject"], "body": body}
    headers = {"Idempotency-Key": job["operation_id"]}
    try:
        answer = await asyncio.to_thread(exchange, config, "POST", "/messages", payload, headers)
    except NoAnswer as exc:
        return envelope(
            exc.kind, code="no_answer", message=exc.message, maybe_sent=exc.kind == "unknown"
        )
    return classify_send(answer)


async def send(config: MailConfig, job: dict[str, Any], body: str) -> dict[str, Any]:
    """Look the operation id up; send only when the service does not already have it."""
    known = await lookup(config, job["operation_id"])
    if known["kind"] == "accepted":
        known["receipt"]["source"] = "lookup"
        return known
    # Not found, or no answer: send. The idempotency key makes the send safe either way.
    return await post(config, job, body)


def not_configured() -> dict[str, Any]:
    return envelope(
        "rejected",
        code="mail_not_configured",
        message="AGENT_MAIL_BASE_URL is not set: no mail service to send with",
    )


@bp.activity_trigger(input_name="job")
@bp.durable_client_input(client_name="client")
async def send_mail(job: dict[str, Any], client: df.DurableOrchestrationClient) -> dict[str, Any]:
    """``{session_id, operation_id, to, subject, body_ref}`` -> envelope (see the module)."""
    config = MailConfig.from_env()
    if config is None:
        return not_configured()
    body = await load_body(client, job["session_id"], job["body_ref"])
    if body is None:
        return envelope(
            "rejected", code="body_not_found", message=f"no stored body for {job['body_ref']!r}"
        )
    return await send(config, job, body)


@bp.activity_trigger(input_name="job")
async def query_mail(job: dict[str, Any]) -> dict[str, Any]:
    """``{operation_id}`` -> accepted (with its receipt), rejected ``not_found``, or no verdict."""
    config = MailConfig.from_env()
    if config is None:
        return not_configured()
    return await lookup(config, job["operation_id"])
