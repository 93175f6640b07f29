"""Agent loops: a prompt submitted to a session on a cron schedule. Pure.

A loop is one eternal orchestration, ``loop:{session}:{loop}`` (``orchestrators/agent_loop.py``):
it sleeps on a durable timer until the next occurrence, submits the prompt as an ordinary
submission whose request id is derived from the occurrence, and continues as new. This module
decides everything that needs no IO: the spec a client may declare, the ids, the next
occurrence, and what a control message does to a loop's state.

Contract:
* ``parse_spec`` validates a declaration (``{loopId, schedule, prompt, timeZone?, tools?,
  policy?}``); ``ValidationError`` names the field (``schedule``, ``timeZone``,
  ``tools[1]``, ``policy.max_rounds`` ...). ``tools`` are names of the catalogue
  (``kernel/turn/tools.py``), each once: every run of the loop may call only those (omitted or
  empty: the whole catalogue, as any submission). ``policy`` holds turn policy fields
  (``kernel.turn.policy.TurnLimits``, e.g. ``{"max_rounds": 3}``) laid over the app's
  settings for each run. ``run_options(spec)`` is what a run's submission carries of both.
* ``occurrence_request_id(loop_id, occurrence)`` is ``loop:{loop_id}:{occurrence}``: the
  submission of one occurrence is idempotent by it, so an occurrence submitted twice (an
  activity retried, a loop replaced while it was submitting) makes one submission and one run.
* ``next_occurrence`` is strictly after the given time; a loop woken late submits the
  occurrence it slept for once, then plans from now: missed slots are not replayed.
* ``control(state, action)``: ``pause`` / ``resume`` / ``delete``; anything else is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kernel.common import ids
from kernel.common.errors import ValidationError
from kernel.loops import cron
from kernel.turn import tools
from kernel.turn.policy import TurnLimits, TurnSettingsError

MAX_PROMPT_CHARS = 4_000
ACTIONS = ("pause", "resume", "delete")
CONTROL_EVENT = "loop_control"


@dataclass(frozen=True)
class LoopSpec:
    loop_id: str
    schedule: str
    prompt: str
    time_zone: str = "UTC"
    tools: tuple[str, ...] = ()
    policy: dict[str, Any] | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "loopId": self.loop_id,
            "schedule": self.schedule,
            "prompt": self.prompt,
            "timeZone": self.time_zone,
            "tools": list(self.tools),
            "policy": self.policy,
        }


def parse_spec(body: Any, now: datetime) -> LoopSpec:
    if not isinstance(body, dict):
        raise ValidationError("invalid_loop", "a loop is a JSON object", "body")
    unknown = set(body) - {"loopId", "schedule", "prompt", "timeZone", "tools", "policy"}
    if unknown:
        first = min(unknown)
        raise ValidationError("unknown_field", f"unknown field {first!r}", first)
    loop_id = ids.validate_key(body.get("loopId"), "loopId")
    prompt = body.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip() or len(prompt) > MAX_PROMPT_CHARS:
        raise ValidationError(
            "invalid_prompt", f"prompt must be 1..{MAX_PROMPT_CHARS} characters", "prompt"
        )
    zone_name = body.get("timeZone") or "UTC"
    if not isinstance(zone_name, str):
        raise ValidationError("invalid_time_zone", "timeZone must be a string", "timeZone")
    try:
        zone = cron.time_zone(zone_name)
    except cron.ScheduleError as exc:
        raise ValidationError("invalid_time_zone", str(exc), "timeZone") from exc
    schedule = body.get("schedule")
    if not isinstance(schedule, str):
        raise ValidationError("invalid_schedule", "schedule must be a string", "schedule")
    try:
        cron.parse(schedule, zone, now)
    except cron.ScheduleError as exc:
        raise ValidationError("invalid_schedule", str(exc), "schedule") from exc
    return LoopSpec(
        loop_id,
        schedule.strip(),
        prompt,
        zone_name,
        _tools(body.get("tools")),
        _policy(body.get("policy")),
    )


def _tools(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ValidationError("invalid_tools", "tools must be a list of tool names", "tools")
    for index, name in enumerate(value):
        if not isinstance(name, str) or name not in tools.TOOLS:
            known = ", ".join(tools.TOOLS)
            raise ValidationError(
                "invalid_tools", f"{name!r} is not a tool; known: {known}", f"tools[{index}]"
            )
        if name in value[:index]:
            raise ValidationError("invalid_tools", f"{name} is listed twice", f"tools[{index}]")
    return tuple(value)


def _policy(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValidationError("invalid_policy", "policy must be an object", "policy")
    try:
        TurnLimits().with_policy(value)  # checked against the defaults; the app's settings
    except TurnSettingsError as exc:  # are laid under it again for each run
        raise ValidationError("invalid_policy", str(exc), f"policy.{exc.setting}") from exc
    return value or None


def run_options(spec: LoopSpec) -> dict[str, Any]:
    """What a run's submission carries besides its text: the declared tools and policy."""
    options: dict[str, Any] = {}
    if spec.tools:
        options["tools"] = list(spec.tools)
    if spec.policy:
        options["policy"] = spec.policy
    return options


def spec_from_json(data: dict[str, Any]) -> LoopSpec:
    """The spec as a loop's input carries it (already validated when it was declared)."""
    return LoopSpec(
        str(data["loopId"]),
        str(data["schedule"]),
        str(data["prompt"]),
        str(data.get("timeZone") or "UTC"),
        tuple(data.get("tools") or ()),
        data.get("policy"),
    )


def loop_instance_id(session_id: str, loop_id: str) -> str:
    return f"loop:{session_id}:{loop_id}"


def loop_prefix(session_id: str) -> str:
    return f"loop:{session_id}:"


def format_occurrence(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def occurrence_request_id(loop_id: str, occurrence: datetime) -> str:
    return f"loop:{loop_id}:{format_occurrence(occurrence)}"


def next_occurrence(
    spec: LoopSpec, after: datetime, previous: datetime | None = None
) -> datetime | None:
    schedule = cron.parse(spec.schedule, cron.time_zone(spec.time_zone), after)
    return schedule.next_after(after, previous)


def control(state: dict[str, Any], action: Any) -> dict[str, Any]:
    """A loop's state after a control message: ``{"paused", "deleted"}``."""
    if action not in ACTIONS:
        raise ValidationError("invalid_action", f"action must be one of {ACTIONS}", "action")
    return {
        "paused": action == "pause" or (action != "resume" and bool(state.get("paused"))),
        "deleted": action == "delete",
    }
