"""The activity side of skills: registering one from the agent, and a skill's model call.

* ``register_from_agent(arguments, session_id)`` is how the ``register_skill`` tool runs
  (``activities/tools.py`` calls it under the tool's attempt record, after a person approved
  the call): it validates the definition again (the tool's pre-check did, but the catalogue
  may have changed since) and stores it through ``adapters.skill_store.register``. Returns the
  tool result ``{"ok": true, "name", "version", "created"}`` or ``{"ok": false, "kind":
  "invalid_skill", "message", "problems"}``. A re-run after a crash finds its definition as
  the latest version and adds nothing.
* ``skill_model_call {"key", "prompt", "timeout_s"}``: one model call of a ``model`` step.
  The prompt is the only message and no tools are offered. A reply is saved in the attempt
  ledger under ``key`` before it is returned, so a reply received but not yet recorded in the
  run's history is reused, never asked for again. Returns ``{"ok": true, "text", "model",
  "usage"}`` or the model-call failure envelope (``kind``: ``rate_limited`` | ``transient`` |
  ``timeout`` | ``fatal``), which the run's retry policy reads.
"""

from __future__ import annotations

import asyncio
import os
import socket
import uuid
from datetime import UTC, datetime
from typing import Any

import azure.durable_functions as df

from adapters import model_provider
from adapters.attempt_ledger import default_ledger
from adapters.skill_store import default_skill_store, register
from kernel.skills import skill as skills
from kernel.turn import planner
from kernel.turn.model_io import ModelRequest, ModelSuccess

bp = df.Blueprint()


def now_text() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


async def register_from_agent(arguments: dict[str, Any], session_id: str) -> dict[str, Any]:
    checked = skills.validate(arguments.get("skill"))
    if not isinstance(checked, skills.Skill):
        return {
            "ok": False,
            "kind": "invalid_skill",
            "message": skills.SkillInvalid(checked).message,
            "problems": [p.to_dict() for p in checked],
        }
    by = {"via": "agent", "session_id": session_id}
    record, created = await asyncio.to_thread(
        register, default_skill_store(), checked, by, now_text()
    )
    return {"ok": True, "name": record["name"], "version": record["version"], "created": created}


async def _ask(prompt: str, timeout_s: float) -> dict[str, Any]:
    entries = [{"n": 1, "role": "user", "kind": "message", "text": prompt, "data": {}}]
    config = model_provider.ProviderConfig.from_settings(os.environ)
    if config is None:
        result: Any = ModelSuccess(planner.plan(entries))
        model = planner.MODEL_NAME
    else:
        request = ModelRequest.from_entries(entries, (), config.model)
        result = await model_provider.complete(config, request, timeout_s)
        model = config.model
    if not isinstance(result, ModelSuccess):
        envelope: dict[str, Any] = result.to_dict()
        return envelope
    response = result.response
    return {
        "ok": True,
        "text": response.content or "",
        "model": response.model or model,
        "usage": response.usage.to_dict(),
    }


@bp.activity_trigger(input_name="job")
async def skill_model_call(job: dict[str, Any]) -> dict[str, Any]:
    ledger = default_ledger()
    key = str(job["key"])
    saved = await asyncio.to_thread(ledger.read, key)
    if saved is not None and saved.completed:
        return {**saved.result, "reused": True}
    timeout_s = float(job.get("timeout_s") or 120)
    result = await _ask(str(job["prompt"]), timeout_s)
    if result["ok"]:
        owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex}"
        await asyncio.to_thread(ledger.create, key, owner, timeout_s)
        result = await asyncio.to_thread(ledger.complete, key, result)
    return result
