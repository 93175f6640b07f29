"""The environment of this host, for a turn to record and to check (``kernel.workspace.environment``).

* ``current()``: ``{"app", "schema", "dependencies", "model", "tools"}`` of this process:
  ``app`` is ``AGENT_APP_VERSION`` or host.json's ``defaultVersion``; ``schema`` the session
  state's schema version; ``dependencies`` a hash of every installed distribution's name and
  version; ``model`` ``<provider>:<model>`` from the model settings (``offline:offline-planner``
  without an endpoint; never the key or the endpoint's address); ``tools`` a hash of the tool
  catalogue (names, policies, approvals, argument schemas). Computed once per process, except
  the model, which follows the settings. ``mcp`` (only when ``AGENT_MCP_SERVERS`` names
  servers): ``{server: hash of its tools}``, added by the turn from its catalogue and by the
  check from a listing now (``activities.mcp.current_hashes``).
* ``check_environment`` (activity): ``{"recorded"}`` -> the decision of
  ``AGENT_ENVIRONMENT_POLICY`` on this host (``Decision.to_dict``) plus ``current``.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from importlib import metadata
from pathlib import Path
from typing import Any

import azure.durable_functions as df

from activities import mcp as mcp_activities
from adapters.model_provider import ProviderConfig
from kernel.session.state import SCHEMA_VERSION
from kernel.turn import tools
from kernel.workspace import environment

bp = df.Blueprint()
HOST_JSON = Path(__file__).resolve().parents[1] / "host.json"


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@functools.cache
def _app_version_from_host_json() -> str:
    try:
        host = json.loads(HOST_JSON.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    return str(host.get("extensions", {}).get("durableTask", {}).get("defaultVersion") or "")


@functools.cache
def dependencies_hash() -> str:
    installed = sorted(
        f"{(dist.metadata['Name'] or '').lower()}=={dist.version}"
        for dist in metadata.distributions()
    )
    return _digest(installed)


@functools.cache
def tools_hash() -> str:
    return _digest(
        [
            [spec.name, spec.policy, spec.requires_approval, spec.to_openai()]
            for spec in tools.TOOLS.values()
        ]
    )


def model_id(settings: dict[str, str] | None = None) -> str:
    config = ProviderConfig.from_settings(dict(os.environ) if settings is None else settings)
    return "offline:offline-planner" if config is None else f"openai-compatible:{config.model}"


def current() -> dict[str, Any]:
    return {
        "app": (os.environ.get("AGENT_APP_VERSION") or "").strip() or _app_version_from_host_json(),
        "schema": SCHEMA_VERSION,
        "dependencies": dependencies_hash(),
        "model": model_id(),
        "tools": tools_hash(),
    }


@bp.activity_trigger(input_name="job")
async def check_environment(job: dict[str, Any]) -> dict[str, Any]:
    recorded = job.get("recorded") or {}
    now = current()
    # The MCP servers' tools as this host sees them now (docs/tools.md); absent when none is
    # configured, so a turn recorded without MCP compares equal.
    hashes = await mcp_activities.current_hashes(recorded.get("mcp"))
    if hashes is not None:
        now["mcp"] = hashes
    policy = environment.policy_of(os.environ.get("AGENT_ENVIRONMENT_POLICY"))
    decision = environment.decide(recorded, now, policy)
    return {**decision.to_dict(), "current": now}
