"""Previews: the rules for live, lossy progress (streamed model text, tool progress). Pure.

A preview is what a reader may see of work that has not produced its durable fact yet: the
text a model has streamed so far, the last progress line of a running tool. It is never a fact:
it lives in a side store (``adapters.previews``), never in an orchestration history or the
session entity, and nothing recovers from it. The contract kept here:

* **Identity.** One preview per ``(session, task)``, overwritten in place. ``task`` is the round
  task for model text (``model_preview_task``: derived from the model call's attempt key, the
  id ``agent_run`` gives the round) and the tool task for tool progress. Every write carries a
  ``seq`` that grows per key, also across a crash and a rerun of the writer (a writer starts
  after the seq it finds).
* **Coalescing** (``Coalescer``): at most one write per key per ``interval_s``; the first
  update is written at once, later ones on the trailing edge, and only the newest text is
  written (the texts in between are dropped: lossy by design).
* **Superseded** (``is_live``): the preview of a task stops being shown once the session's
  state says its fact landed or can no longer land. Model text of a round lives while its
  submission is the active one and the round task is in the head, not terminal, and still in
  phase ``request`` - the commit that appends the assistant entry moves the round's phase in
  the same commit, so no snapshot of the session holds both the entry and its preview. Tool
  progress lives while the tool task is ``running`` under the active submission. Readers drop
  the rest (and may delete them).
* **The tag** (``preview_tag``): a reader's token for "the previews I have seen"; the change
  stream answers early when the live previews' tag differs from the reader's.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from kernel.common import ids
from kernel.common.errors import ValidationError
from kernel.common.statuses import TERMINAL_TASK_STATUSES, TaskStatus

PreviewKind = Literal["model_text", "tool_progress"]
MODEL_TEXT: PreviewKind = "model_text"
TOOL_PROGRESS: PreviewKind = "tool_progress"
KINDS = (MODEL_TEXT, TOOL_PROGRESS)
MAX_PREVIEW_CHARS = 16_000
DEFAULT_INTERVAL_S = 0.1
TAG_CHARS = 16
_TAG = re.compile(rf"^[0-9a-f]{{{TAG_CHARS}}}$")
# {nonce}:{submission}:model:{round}.{attempt}:{model attempt} (orchestrators/agent_round.py)
_MODEL_ATTEMPT_KEY = re.compile(
    r"^[^:]+:(?P<submission>[A-Za-z0-9_.-]+):model:(?P<round>\d+)\.(?P<attempt>\d+):\d+$"
)


class PreviewSettingsError(ValueError):
    """A preview setting has a value the app cannot use; the message names the setting."""


@dataclass(frozen=True, slots=True)
class PreviewSettings:
    """``AGENT_PREVIEWS`` (``on``/``off``, default off), ``AGENT_PREVIEW_INTERVAL_MS`` (the
    coalescing interval, 10..10,000, default 100) and ``AGENT_PLANNER_STREAM_DELAY_MS`` (the
    offline planner's pause between the chunks of its reply, 0..5,000, default 0)."""

    enabled: bool = False
    interval_s: float = DEFAULT_INTERVAL_S
    planner_delay_s: float = 0.0

    @classmethod
    def from_settings(cls, settings: Mapping[str, str]) -> PreviewSettings:
        raw = (settings.get("AGENT_PREVIEWS") or "").strip().lower()
        if raw not in ("", "on", "off", "true", "false", "1", "0"):
            raise PreviewSettingsError(f"AGENT_PREVIEWS must be 'on' or 'off', not {raw!r}")
        return cls(
            enabled=raw in ("on", "true", "1"),
            interval_s=_millis(settings, "AGENT_PREVIEW_INTERVAL_MS", 100, 10, 10_000),
            planner_delay_s=_millis(settings, "AGENT_PLANNER_STREAM_DELAY_MS", 0, 0, 5_000),
        )


def _millis(settings: Mapping[str, str], name: str, default: int, low: int, high: int) -> float:
    raw = (settings.get(name) or "").strip()
    if not raw:
        return default / 1000
    if not raw.isdigit() or not low <= int(raw) <= high:
        raise PreviewSettingsError(f"{name} must be an integer in {low}..{high}, not {raw!r}")
    return int(raw) / 1000


# --- identity ------------------------------------------------------------------------------


def model_preview_task(session_id: str, attempt_key: str) -> tuple[str, str, int] | None:
    """(round task id, submission id, round) of a model call's attempt key, or None when the
    key is not a round's (then the call streams no preview).

    The round id is the one ``agent_run`` gives its round: ``{run}:round-{n}``, and
    ``{run}:round-{n}.{k}`` for the k-th operator retry."""
    found = _MODEL_ATTEMPT_KEY.match(attempt_key)
    if found is None:
        return None
    submission = found["submission"]
    round_no, attempt = int(found["round"]), int(found["attempt"])
    suffix = f"round-{round_no}" if attempt == 1 else f"round-{round_no}.{attempt}"
    try:
        run = f"{ids.turn_instance_id(session_id, submission)}:run"
    except ValidationError:
        return None
    return f"{run}:{suffix}", submission, round_no


def tool_preview_submission(tool_task_id: str) -> str | None:
    """The submission of a tool task id (``{submission}:tool:{round}:{call}``), or None."""
    submission, found, _ = tool_task_id.partition(":tool:")
    return submission if found and submission else None


def clip(text: str) -> tuple[str, bool]:
    """The text a preview holds (its head, at most ``MAX_PREVIEW_CHARS``) and whether it was
    cut: the final entry holds the whole text, the preview only has to show it growing."""
    if len(text) <= MAX_PREVIEW_CHARS:
        return text, False
    return text[:MAX_PREVIEW_CHARS], True


def record(
    *,
    session_id: str,
    task: str,
    kind: PreviewKind,
    submission_id: str,
    seq: int,
    text: str,
    at: str,
    round_no: int | None = None,
) -> dict[str, Any]:
    """The stored shape of one preview (what readers get, with ``"preview": true``)."""
    shown, truncated = clip(text)
    out: dict[str, Any] = {
        "preview": True,
        "session_id": session_id,
        "task": task,
        "kind": kind,
        "submission_id": submission_id,
        "seq": seq,
        "text": shown,
        "truncated": truncated,
        "at": at,
    }
    if round_no is not None:
        out["round"] = round_no
    return out


def valid_record(raw: object) -> dict[str, Any] | None:
    """``raw`` if it has the stored shape, else None: a damaged preview is dropped, never an
    error (nothing depends on it)."""
    if not isinstance(raw, dict):
        return None
    fields = (raw.get("task"), raw.get("submission_id"), raw.get("text"), raw.get("session_id"))
    if not all(isinstance(v, str) for v in fields) or raw.get("kind") not in KINDS:
        return None
    seq = raw.get("seq")
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 1:
        return None
    return raw


# --- coalescing ----------------------------------------------------------------------------


@dataclass(slots=True)
class Coalescer:
    """When to write the updates of one preview key; times are the caller's monotonic seconds.

    ``offer(text)`` keeps the newest text; ``due_in(now)`` says how long until it may be
    written (None: nothing to write); ``take(now)`` hands out the text to write when it is due
    and counts the write. At most one write per ``interval_s``; the first immediately."""

    interval_s: float = DEFAULT_INTERVAL_S
    last_write_at: float | None = None
    pending: str | None = None
    writes: int = 0

    def offer(self, text: str) -> None:
        self.pending = text

    def due_in(self, now: float) -> float | None:
        if self.pending is None:
            return None
        if self.last_write_at is None:
            return 0.0
        return max(0.0, self.last_write_at + self.interval_s - now)

    def take(self, now: float) -> str | None:
        wait = self.due_in(now)
        if wait is None or wait > 0:
            return None
        text, self.pending = self.pending, None
        self.last_write_at = now
        self.writes += 1
        return text


# --- readers -------------------------------------------------------------------------------


def is_live(preview: Mapping[str, Any], state: Mapping[str, Any] | None) -> bool:
    """True while ``preview``'s fact has not landed in ``state`` (the session head) and still
    can; see the module docstring."""
    if state is None or preview.get("submission_id") != state.get("active_submission"):
        return False
    task = (state.get("tasks") or {}).get(preview.get("task"))
    if not isinstance(task, dict) or task.get("status") in TERMINAL_TASK_STATUSES:
        return False
    if preview.get("kind") == MODEL_TEXT:
        return bool(task.get("phase") == "request")
    return bool(task.get("status") == TaskStatus.RUNNING)


def split_live(
    previews: Iterable[Mapping[str, Any]], state: Mapping[str, Any] | None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(live previews ordered by task, superseded ones) of one session."""
    live: list[dict[str, Any]] = []
    gone: list[dict[str, Any]] = []
    for preview in previews:
        (live if is_live(preview, state) else gone).append(dict(preview))
    live.sort(key=lambda p: (p["task"], p["kind"]))
    return live, gone


def preview_tag(previews: Iterable[Mapping[str, Any]]) -> str:
    """The readers' token for a set of live previews: "" for none."""
    keys = sorted(f"{p['kind']}\x00{p['task']}\x00{p['seq']}" for p in previews)
    if not keys:
        return ""
    return hashlib.sha256("\x01".join(keys).encode()).hexdigest()[:TAG_CHARS]


def parse_tag(value: str | None) -> str | None:
    """The ``previews`` query parameter: None (absent), "" (none seen) or a tag."""
    if value is None:
        return None
    if value == "" or _TAG.match(value):
        return value
    raise ValidationError(
        "invalid_previews",
        f"previews must be empty or the previewTag of an earlier answer ({TAG_CHARS} hex digits)",
        "previews",
    )
