"""Host settings from an app's ``host.json`` and ``local.settings.json``. Pure parsing
(plus ``apply_local_settings``, which sets process environment like Core Tools does).

Read from host.json: ``extensions.http.routePrefix`` (default ``api``),
``extensions.durableTask.hubName`` (default ``TestHubName``),
``maxConcurrentActivityFunctions`` / ``maxConcurrentOrchestratorFunctions`` /
``maxConcurrentEntityFunctions`` (default 10 each), ``defaultVersion``,
``overridableExistingInstanceStates`` (``NonRunningStates`` default, or ``AnyState``),
``versionMatchStrategy`` / ``versionFailureStrategy`` (``versioning.py``; these and
``defaultVersion`` may be overridden by ``AzureFunctionsJobHost__extensions__durableTask__*``
app settings, as the Functions host allows),
``storageProvider.partitionCount`` (1-16, default 4: the ownership partitions of a hub that
several hosts share, ``ownership.py``), ``extendedSessionsEnabled`` (incremental replay, ``sessions.py``; default true here, unlike
the extension, because this host's sessions decide what a full replay decides - see
docs/architecture.md, "Incremental replay"; ``false`` turns them off; the app setting
``AzureFunctionsJobHost__extensions__durableTask__extendedSessionsEnabled`` overrides it, and
``DURABLE_HOST_SESSIONS`` overrides both, ``0`` being the off switch),
and the top-level ``functionTimeout`` (``hh:mm:ss``) applied to activities.

App-setting references: a string value of ``extensions.durableTask`` written ``%Name%``
(the documented ``"hubName": "%TASKHUB_NAME%"``) is replaced by the app setting ``Name``, as
the extension resolves its options through the Functions host's name resolver. Settings
are the environment, which ``apply_local_settings`` has filled from ``local.settings.json``
``Values``; a reference to a setting that does not exist is a ``ConfigError`` naming it.

``set_script_root`` sets ``AzureWebJobsScriptRoot`` to the app directory, as the Functions
host (and Core Tools) do for the worker: there the setting *is* the directory the app is
loaded from, so the app always sees its own root; a different value is replaced.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from durable_host.cluster.ownership import DEFAULT_PARTITIONS, check_partition_count
from durable_host.core.records import RuntimeStatus
from durable_host.core.versioning import ENV_PREFIX, VersionPolicy, VersionSettingError, policy_from

# overridableExistingInstanceStates: the statuses in which a start may reuse an id.
NON_RUNNING: tuple[str, ...] = (
    RuntimeStatus.COMPLETED,
    RuntimeStatus.FAILED,
    RuntimeStatus.TERMINATED,
    RuntimeStatus.CANCELED,
)
ANY_STATE: tuple[str, ...] = (
    *NON_RUNNING,
    RuntimeStatus.RUNNING,
    RuntimeStatus.PENDING,
    RuntimeStatus.SUSPENDED,
    RuntimeStatus.CONTINUED_AS_NEW,
)
_HUB_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9]{2,49}$")
_SETTING_REFERENCE = re.compile(r"%([^%\s]+)%")
SCRIPT_ROOT = "AzureWebJobsScriptRoot"
log = logging.getLogger("durable_host")


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
    # defaultVersion and the version match/failure strategies (versioning.py)
    versioning: VersionPolicy = field(default_factory=VersionPolicy)
    extended_sessions: bool = True
    # extensions.durableTask.storageProvider.partitionCount (1-16): ownership partitions of
    # a hub that several hosts share (Azure store; ownership.py)
    partition_count: int = DEFAULT_PARTITIONS


def parse_timespan(text: str) -> float:
    """``[d.]hh:mm:ss[.fff]`` -> seconds."""
    match = re.fullmatch(r"(?:(\d+)\.)?(\d{1,2}):(\d{2}):(\d{2}(?:\.\d+)?)", text.strip())
    if not match:
        raise ConfigError(f"functionTimeout {text!r} is not a time span like 00:05:00")
    days, hours, minutes, seconds = match.groups()
    return int(days or 0) * 86400 + int(hours) * 3600 + int(minutes) * 60 + float(seconds)


def resolve_settings(value: Any, settings: Mapping[str, str], where: str) -> Any:
    """``value`` with every ``%Name%`` in its strings replaced by the setting ``Name``."""
    if isinstance(value, dict):
        return {k: resolve_settings(v, settings, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, list):
        return [resolve_settings(v, settings, where) for v in value]
    if not isinstance(value, str):
        return value

    def setting(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in settings:
            raise ConfigError(
                f"host.json {where} refers to the app setting %{name}%, which is not set"
                " (set it in the environment or in local.settings.json Values)"
            )
        return settings[name]

    return _SETTING_REFERENCE.sub(setting, value)


def parse_host_json(
    app_dir: Path, data: dict[str, Any], settings: Mapping[str, str] | None = None
) -> HostConfig:
    extensions = data.get("extensions") or {}
    http = extensions.get("http") or {}
    durable = resolve_settings(
        extensions.get("durableTask") or {},
        {} if settings is None else settings,
        "extensions.durableTask",
    )
    hub = str(durable.get("hubName") or "TestHubName")
    if not _HUB_NAME.match(hub):
        raise ConfigError(f"hubName {hub!r} must be 3-50 letters or digits, starting with a letter")
    states = durable.get("overridableExistingInstanceStates", "NonRunningStates")
    timeout = data.get("functionTimeout")
    try:
        versioning = policy_from(durable, settings)  # app settings may override host.json
    except VersionSettingError as exc:
        raise ConfigError(str(exc)) from exc
    provider = durable.get("storageProvider") or {}
    try:
        partitions = check_partition_count(provider.get("partitionCount", DEFAULT_PARTITIONS))
    except ValueError as exc:
        raise ConfigError(f"extensions.durableTask.storageProvider.{exc}") from exc
    return HostConfig(
        app_dir=app_dir,
        route_prefix=str(http.get("routePrefix", "api")).strip("/"),
        hub_name=hub,
        max_activities=int(durable.get("maxConcurrentActivityFunctions", 10)),
        max_orchestrators=int(durable.get("maxConcurrentOrchestratorFunctions", 10)),
        max_entities=int(durable.get("maxConcurrentEntityFunctions", 10)),
        default_version=versioning.default_version,
        function_timeout=parse_timespan(timeout) if timeout else None,
        overridable_states=ANY_STATE if str(states).lower() == "anystate" else NON_RUNNING,
        versioning=versioning,
        extended_sessions=_extended_sessions(durable, settings or {}),
        partition_count=partitions,
    )


def _extended_sessions(durable: Mapping[str, Any], settings: Mapping[str, str]) -> bool:
    """host.json's ``extendedSessionsEnabled``, unless the app setting that the Functions host
    maps onto it says otherwise. Anything but a boolean (``true``/``false``, any case) is
    refused, naming where it came from: a typo must not quietly mean off."""
    name = ENV_PREFIX + "extendedSessionsEnabled"
    value: Any = settings.get(name)
    if value is None:
        name = "extensions.durableTask.extendedSessionsEnabled"
        value = durable.get("extendedSessionsEnabled", True)
    text = str(value).strip().lower()
    if text not in ("true", "false"):
        raise ConfigError(f"{name} {value!r} is not true or false")
    return text == "true"


def load(app_dir: Path) -> HostConfig:
    path = Path(app_dir) / "host.json"
    data: dict[str, Any] = {}
    if path.is_file():
        try:
            data = json.loads(path.read_text())
        except ValueError as exc:
            raise ConfigError(f"{path} is not valid JSON: {exc}") from exc
    return parse_host_json(Path(app_dir), data, os.environ)


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


def set_script_root(app_dir: Path) -> None:
    """``AzureWebJobsScriptRoot`` = the app directory (see the module docstring)."""
    root = str(Path(app_dir).resolve())
    given = os.environ.get(SCRIPT_ROOT)
    if given and Path(given).resolve() != Path(root):
        log.warning("%s=%s replaced by the app directory %s", SCRIPT_ROOT, given, root)
    os.environ[SCRIPT_ROOT] = root
