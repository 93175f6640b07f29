"""The environment a turn runs in, and whether a changed one may continue it. Pure.

A turn records its environment when it starts (docs/workspace.md, "The environment"):

``{"app": <app version>, "schema": <session state schema version>, "dependencies": <hash of
the installed distributions>, "model": "<provider>:<model or deployment>", "tools": <hash of
the tool catalogue>, "mcp": {<server>: <hash of its tools>}}`` (``mcp`` only when MCP servers
are configured: docs/tools.md)

Before every round after its first - the points where a turn goes on, possibly on another
host after a crash or a long wait - the run compares the environment of the host that serves
it now with the recorded one under ``AGENT_ENVIRONMENT_POLICY``:

==================  =====================================================================
``strict``          any change blocks the turn (the default: the kernel cannot tell which
                    changes a saved state survives, so it never guesses)
``model-may-change`` a different model continues; any other change blocks
``off``             nothing is compared
==================  =====================================================================

``decide(recorded, current, policy)`` returns ``Decision``: ``ok`` and, when blocked, the
fields that changed and a reason naming them (``model: a:x -> a:y``). An unknown policy is
refused at the check like a change (``policy_problem``), never read as ``off``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

POLICIES = ("strict", "model-may-change", "off")
DEFAULT_POLICY = "strict"
FIELDS = ("app", "schema", "dependencies", "model", "tools", "mcp")
_MAY_CHANGE: dict[str, frozenset[str]] = {
    "strict": frozenset(),
    "model-may-change": frozenset({"model"}),
}


@dataclass(frozen=True, slots=True)
class Decision:
    ok: bool
    policy: str
    changed: tuple[str, ...] = ()
    reason: str | None = None
    allowed: tuple[str, ...] = field(default=())  # fields that changed and the policy let pass

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "policy": self.policy,
            "changed": list(self.changed),
            "allowed": list(self.allowed),
            "reason": self.reason,
        }


def policy_of(raw: str | None) -> str:
    """The policy a setting names (empty: the default), as written; ``decide`` judges it."""
    value = (raw or "").strip().lower()
    return value or DEFAULT_POLICY


def decide(recorded: Mapping[str, Any], current: Mapping[str, Any], policy: str) -> Decision:
    """May a turn recorded under ``recorded`` go on in ``current``, under ``policy``?"""
    if policy not in POLICIES:
        reason = (
            f"environment policy {policy!r} is not one of {', '.join(POLICIES)}; "
            "the turn is held rather than continued unchecked"
        )
        return Decision(False, policy, ("policy",), reason)
    if policy == "off":
        return Decision(True, policy)
    changed = tuple(name for name in FIELDS if recorded.get(name) != current.get(name))
    tolerated = _MAY_CHANGE[policy]
    refused = tuple(name for name in changed if name not in tolerated)
    allowed = tuple(name for name in changed if name in tolerated)
    if not refused:
        return Decision(True, policy, changed, None, allowed)
    what = "; ".join(
        f"{name}: {_short(recorded.get(name))} -> {_short(current.get(name))}" for name in refused
    )
    reason = f"environment_changed: {what} (AGENT_ENVIRONMENT_POLICY={policy} refuses it)"
    return Decision(False, policy, refused, reason[:1000], allowed)


def _short(value: object) -> str:
    text = "none" if value is None else str(value)
    return text if len(text) <= 40 else text[:16] + "..." + text[-8:]
