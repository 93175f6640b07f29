"""History retention: which orchestration histories of settled submissions may go. Pure.

Every submission leaves orchestration instances behind: its turn ``{session}:turn:{sub}``, the
run ``{turn}:run``, the rounds and other children under ``{turn}:``, and the tool tasks (and
their children) under ``{sub}:`` (``kernel.common.ids``). The session entity keeps what users read (the
submission's outcome, its entries, its task graph), so once a submission is final its instances
are only a debugging aid; the app setting ``AGENT_HISTORY_RETENTION`` says how long they stay.

Contract:
* ``parse_retention(raw)``: ``off`` (never purge), ``0`` (as soon as the session has moved on)
  or a whole number with a unit ``s|m|h|d`` (a bare number is seconds), at most
  ``MAX_RETENTION``; blank means ``DEFAULT_RETENTION``. Anything else raises
  ``RetentionSettingsError`` naming the setting, the value and the accepted forms: a typo never
  deletes anything.
* ``settled_submissions(turns, state, own_turn, cutoff)``: the submission ids whose turn may be
  purged now, oldest first, at most ``MAX_SUBMISSIONS_PER_PASS``: the turn has ended, was last
  updated at or before ``cutoff``, is not the caller's own, and the session does not hold the
  submission as open (queued or active). A submission the head does not hold was sealed (always
  final) or never accepted (a rejected turn): nothing of the session refers to its instances.
* ``purge_order(turn_id, under)``: the instance ids to purge for one submission, children first
  and the turn last, or None while any of them still runs. The turn goes last so that a purge
  cut short (a crash) leaves the turn behind as the mark of unfinished work: the next pass
  finds it again and purges what is left.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from kernel.common.statuses import ENDED_RUNTIME_STATUSES, FINAL_SUBMISSION_STATUSES

SETTING = "AGENT_HISTORY_RETENTION"
DEFAULT_RETENTION = "7d"
MAX_RETENTION = timedelta(days=3650)
MAX_SUBMISSIONS_PER_PASS = 10  # bounds one pass; the next submission's pass goes on from there
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"^(\d{1,10})([smhd]?)$")
_FORMS = "'off' or a whole number of seconds, minutes, hours or days (0, 90s, 30m, 12h, 7d)"


class RetentionSettingsError(ValueError):
    """``AGENT_HISTORY_RETENTION`` holds something that is not a retention."""


def parse_retention(raw: object) -> timedelta | None:
    """The retention ``raw`` names; None means ``off`` (histories are kept forever)."""
    text = str(raw if raw is not None else "").strip().lower() or DEFAULT_RETENTION
    if text == "off":
        return None
    found = _DURATION.match(text)
    if found is None:
        raise RetentionSettingsError(f"{SETTING} must be {_FORMS}, not {raw!r}")
    value = timedelta(seconds=int(found[1]) * _UNITS[found[2] or "s"])
    if value > MAX_RETENTION:
        raise RetentionSettingsError(
            f"{SETTING} must be at most {MAX_RETENTION.days}d (or 'off'), not {raw!r}"
        )
    return value


def from_settings(settings: Mapping[str, str]) -> timedelta | None:
    return parse_retention(settings.get(SETTING))


@dataclass(frozen=True, slots=True)
class Instance:
    """What a retention pass needs of an instance's status."""

    instance_id: str
    runtime_status: str | None
    created: datetime | None
    updated: datetime | None

    @property
    def ended(self) -> bool:
        return self.runtime_status in ENDED_RUNTIME_STATUSES


def settled_submissions(
    turns: Iterable[Instance], state: Mapping[str, Any] | None, own_turn: str, cutoff: datetime
) -> list[str]:
    """Submission ids whose instances may be purged now (see the module)."""
    held = (state or {}).get("submissions") or {}
    found: list[tuple[datetime, str]] = []
    for turn in turns:
        prefix, sep, sub_id = turn.instance_id.rpartition(":turn:")
        if not sep or not prefix or ":" in sub_id or turn.instance_id == own_turn:
            continue
        if not turn.ended or turn.updated is None or turn.updated > cutoff:
            continue
        record = held.get(sub_id)
        if record is not None and record.get("status") not in FINAL_SUBMISSION_STATUSES:
            continue  # the session still holds it open (e.g. its turn was terminated)
        found.append((turn.updated, sub_id))
    found.sort()
    return [sub_id for _, sub_id in found[:MAX_SUBMISSIONS_PER_PASS]]


def purge_order(turn_id: str, under: Iterable[Instance]) -> list[str] | None:
    """Children (deepest ids first), then the turn; None while any instance still runs."""
    children = {i.instance_id: i for i in under if i.instance_id != turn_id}
    if any(not child.ended for child in children.values()):
        return None
    return [*sorted(children, key=lambda i: (-len(i), i)), turn_id]
