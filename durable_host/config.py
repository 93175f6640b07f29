"""Host settings from an app's ``host.json`` and ``local.settings.json``. Pure parsing
(plus ``apply_local_settings``, which sets process environment like Core Tools does).

Read from host.json: ``extensions.http.routePrefix`` (default ``api``),
``extensions.durableTask.hubName`` (default ``TestHubName``),
``maxConcurrentActivityFunctions`` / ``maxConcurrentOrchestratorFunctions`` /
``maxConcurrentEntityFunctions`` (default 10 each), ``defaultVersion``,
``overridableExistingInstanceStates`` (``NonRunningStates`` default, or ``AnyState``),
``extendedSessionsEnabled`` (incremental replay, ``sessions.py``; default false),
and the top-level ``functionTimeout`` (``hh:mm:ss``) applied to activities.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from durable_host.records import RuntimeStatus

# overridableExistingInstanceStates: the statuses in which a start may reuse an id.
NON_RUNNING: tuple[str, ...] = (
    RuntimeStatus.COMPLETED, RuntimeStatus.FAILED, RuntimeStatus.TERMINATED, RuntimeStatus.CANCELED,
)
ANY_STATE: tuple[str, ...] = (
    *NON_RUNNING,
    RuntimeStatus.RUNNING, RuntimeStatus.PENDING, RuntimeStatus.SUSPENDED,
    RuntimeStatus.CONTINUED_AS_NEW,
)
_HUB_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9]{2,49}$")


class ConfigError(Exception):
    pass


@dataclass(frozen=True, slots=True)
class HostConfig:
    app_dir: Path
    route_prefix: str = "api"
    hub_name: str = "TestHubName"
    max_activities: int = 10
    max_orchestrators: int = 10
    max_entities: int = 10
    default_version: str | None = None
    function_timeout: float | None = None
    overridable_states: tuple[str, ...] = NON_RUNNING
    extended_sessions: bool = False


def parse_timespan(text: str) -> float:
    """``[d.]hh:mm:ss[.fff]`` -> seconds."""
    match = re.fullmatch(r"(?:(\d+)\.)?(\d{1,2}):(\d{2}):(\d{2}(?:\.\d+)?)", text.strip())
    if not match:
        raise ConfigError(f"functionTimeout {text!r} is not a time span like 00:05:00")
    days, hours, minutes, seconds = match.groups()
    return int(days or 0) * 86400 + int(hours) * 3600 + int(minutes) * 60 + float(seconds)


def parse_host_json(app_dir: Path, data: dict[str, Any]) -> HostConfig:
    extensions = data.get("extensions") or {}
    http = extensions.get("http") or {}
    durable = extensions.get("durableTask") or {}
    hub = str(durable.get("hubName") or "TestHubName")
    if not _HUB_NAME.match(hub):
        raise ConfigError(f"hubName {hub!r} must be 3-50 letters or digits, starting with a letter")
    states = durable.get("overridableExistingInstanceStates", "NonRunningStates")
    timeout = data.get("functionTimeout")
    return HostConfig(
        app_dir=app_dir,
        route_prefix=str(http.get("routePrefix", "api")).strip("/"),
        hub_name=hub,
        max_activities=int(durable.get("maxConcurrentActivityFunctions", 10)),
        max_orchestrators=int(durable.get("maxConcurrentOrchestratorFunctions", 10)),
        max_entities=int(durable.get("maxConcurrentEntityFunctions", 10)),
        default_version=durable.get("defaultVersion"),
        function_timeout=parse_timespan(timeout) if timeout else None,
        overridable_states=ANY_STATE if str(states).lower() == "anystate" else NON_RUNNING,
        extended_sessions=str(durable.get("extendedSessionsEnabled", False)).lower() == "true",
    )


def load(app_dir: Path) -> HostConfig:
    path = Path(app_dir) / "host.json"
    data: dict[str, Any] = {}
    if path.is_file():
        try:
            data = json.loads(path.read_text())
        except ValueError as exc:
            raise ConfigError(f"{path} is not valid JSON: {exc}") from exc
    return parse_host_json(Path(app_dir), data)


def apply_local_settings(app_dir: Path) -> None:
    """Copy ``local.settings.json`` Values into the environment, never overriding."""
    path = Path(app_dir) / "local.settings.json"
    if not path.is_file():
        return
    try:
        values = json.loads(path.read_text()).get("Values") or {}
    except ValueError as exc:
        raise ConfigError(f"{path} is not valid JSON: {exc}") from exc
    for key, value in values.items():
        os.environ.setdefault(str(key), str(value))
