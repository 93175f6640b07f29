"""Per-approval tokens: what is stored of them and how a presented token is checked. Pure.

A tool that needs approval gets one token per decision (``approve``, ``reject``), made by the
``issue_approval`` activity and mailed to the approver as links. Only
``token_hash(task, decision, token)`` leaves that activity: the orchestration publishes the
hashes in its custom status while it waits, and the approval route hashes what it is given.
The hash covers the tool task id and the decision as well as the token, so a token is good
for one task and one decision even if hashes were ever compared across tasks. A token is 32
random bytes, so its sha256 cannot be turned back into it.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping

DECISIONS = ("approve", "reject")
TOKEN_PATTERN = r"^[A-Za-z0-9_-]{20,128}$"


def token_hash(task_id: str, decision: str, token: str) -> str:
    return hashlib.sha256(f"{task_id}\n{decision}\n{token}".encode()).hexdigest()


def matches(hashes: Mapping[str, object] | None, task_id: str, decision: str, token: str) -> bool:
    """True when ``token`` is the one issued for ``decision`` of ``task_id`` (constant time)."""
    expected = (hashes or {}).get(decision)
    if not isinstance(expected, str):
        return False
    return hmac.compare_digest(expected, token_hash(task_id, decision, token))


def claim_owner(digest: str) -> str:
    """The owner a link's decision claims the task's decision marker with."""
    return f"link:{digest}"
