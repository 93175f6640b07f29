"""Who is calling: the principal a trusted proxy names, and which sessions it may touch.

On Azure, App Service authentication ("Easy Auth") signs the caller in and passes the
principal's id to the app in the ``X-MS-CLIENT-PRINCIPAL-ID`` header; the platform strips any
copy of that header a client sends. Nothing strips it anywhere else (behind the durable host,
behind a plain reverse proxy), where any client could claim any principal. So the header
counts only when the setting ``AGENT_TRUST_CLIENT_PRINCIPAL`` is ``1`` (or ``true``): the
operator says a proxy in front of the app sets it. Without the setting principals are ignored
and every caller with the function key sees every session (the single-tenant default).

With the setting on:
* a session records the principal of its first submission as its ``owner`` (schema v4);
* a session owned by another principal - or owned at all, for a caller without a principal -
  answers 404 ``session_not_found`` to every route of the sessions API and to the page,
  exactly as a session that does not exist, so its existence is not revealed;
* a session without an owner (created before owners were recorded, or while the setting was
  off) stays open to every caller with the key.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

import azure.functions as func

from kernel.common.errors import NotFoundError, ValidationError

TRUST_SETTING = "AGENT_TRUST_CLIENT_PRINCIPAL"
HEADER = "X-MS-CLIENT-PRINCIPAL-ID"
_PRINCIPAL = re.compile(r"^[\x21-\x7e]{1,128}$")  # what kernel.session.requests accepts as an owner


@dataclass(frozen=True, slots=True)
class Caller:
    """``trusted``: principals count; ``principal``: the caller's id (None: signed out)."""

    trusted: bool
    principal: str | None

    def owner_fields(self) -> dict[str, Any]:
        """What a submission's turn passes on to ``accept``: the owner, only when trusted."""
        return {"owner": self.principal} if self.trusted else {}

    def may_see(self, state: dict[str, Any] | None) -> bool:
        owner = (state or {}).get("owner")
        return not self.trusted or owner is None or owner == self.principal


ANYONE = Caller(False, None)  # principals not trusted: every session is visible


def trusted() -> bool:
    return os.environ.get(TRUST_SETTING, "").strip().lower() in ("1", "true")


def caller(req: func.HttpRequest) -> Caller:
    if not trusted():
        return ANYONE
    value = req.headers.get(HEADER)
    if value is None or value == "":
        return Caller(True, None)
    if not _PRINCIPAL.match(value):
        raise ValidationError("invalid_principal", f"{HEADER} is not a principal id", HEADER)
    return Caller(True, value)


def check(who: Caller, state: dict[str, Any] | None, session_id: str) -> None:
    """Raise the 404 of a missing session when ``who`` may not see this session."""
    if not who.may_see(state):
        raise NotFoundError("session_not_found", f"no session {session_id!r}", "sessionId")
