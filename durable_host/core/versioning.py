"""Orchestration versions, as the Durable extension's worker versioning treats them. Pure.

Every instance carries the version it was created with (``ExecutionStarted.Version``: the
start request's ``version``, else host.json ``defaultVersion``; a sub-orchestration's action
``version``, else ``defaultVersion``; continue-as-new keeps it). A host decides, before it runs
an instance's code, whether its own version may run it (DTFx ``TaskOrchestrationDispatcher``
with ``VersioningSettings``):

* ``versionMatchStrategy`` ``None``: any version runs; ``Strict``: only a version equal to
  ``defaultVersion`` (string equality, as DTFx compares for Strict); ``CurrentOrOlder`` (the
  extension's default): a version that ``compare`` finds equal or older.
* ``versionFailureStrategy`` ``Reject`` (default): the instance is left untouched - its
  messages stay in the inbox, nothing is consumed, failed or counted - until a host that may
  run it serves the hub; ``Fail``: the instance fails with ``VersionMismatch``.

``compare`` is DTFx's ``VersioningSettings.CompareVersions``: empty (or blank) versions are
equal and older than any other; two versions that ``System.Version`` parses (2 to 4
non-negative integer parts) compare part by part, a missing part below any present one;
anything else compares as ordinal case-insensitive strings.

Decision: a host.json that names neither ``defaultVersion`` nor ``versionMatchStrategy`` is an
unversioned app, and its host checks nothing (``None``): there is no version of its own to
compare with, and an unversioned app that starts an instance with an explicit ``version``
keeps running it, as before versions were checked.

Settings may be overridden by app settings the way the Functions host overrides host.json:
``AzureFunctionsJobHost__extensions__durableTask__<name>`` (``policy_from``).

``blocked`` says whether a batch of inbox messages would make this host run an instance's
code at a version it must not run. A terminate goes through (it runs no code, and an operator
must be able to end an instance no serving host can run); late messages for a finished
instance go through too (they are dropped without running code).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from durable_host.core.records import TERMINAL, MessageKind

ENV_PREFIX = "AzureFunctionsJobHost__extensions__durableTask__"
MISMATCH = "VersionMismatch"
# DTFx's FailureDetails message for a version failure (ErrorType "VersionMismatch").
MISMATCH_TEXT = "Orchestration version did not comply with Worker Versioning"


class MatchStrategy(enum.StrEnum):
    NONE = "None"
    STRICT = "Strict"
    CURRENT_OR_OLDER = "CurrentOrOlder"


class FailureStrategy(enum.StrEnum):
    REJECT = "Reject"
    FAIL = "Fail"


class VersionSettingError(ValueError):
    pass


_PART = re.compile(r"\s*\+?\d+\s*")
_INT32_MAX = 2**31 - 1


def _dotnet_version(text: str) -> tuple[int, ...] | None:
    """``System.Version.TryParse``: 2-4 dot-separated non-negative int32 parts, else None."""
    parts = text.split(".")
    if not 2 <= len(parts) <= 4 or not all(_PART.fullmatch(p) for p in parts):
        return None
    values = tuple(int(p) for p in parts)
    if any(v > _INT32_MAX for v in values):
        return None
    # A missing part is -1 in System.Version, so 1.0 < 1.0.0.
    return values + (-1,) * (4 - len(values))


def compare(source: str | None, other: str | None) -> int:
    """Negative, zero or positive as ``source`` is older than, equal to or newer than ``other``."""
    a, b = (source or "").strip(), (other or "").strip()
    if not a and not b:
        return 0
    if not a:
        return -1
    if not b:
        return 1
    parsed_a, parsed_b = _dotnet_version(source or ""), _dotnet_version(other or "")
    if parsed_a is not None and parsed_b is not None:
        return (parsed_a > parsed_b) - (parsed_a < parsed_b)
    # OrdinalIgnoreCase compares the upper-cased UTF-16 code units.
    upper_a, upper_b = (source or "").upper(), (other or "").upper()
    return (upper_a > upper_b) - (upper_a < upper_b)


@dataclass(frozen=True, slots=True)
class VersionPolicy:
    """What this host runs: its ``defaultVersion`` and the two strategies."""

    default_version: str | None = None
    match: MatchStrategy = MatchStrategy.NONE
    failure: FailureStrategy = FailureStrategy.REJECT

    @property
    def host_version(self) -> str:
        return self.default_version or ""

    def allows(self, version: str | None) -> bool:
        if self.match == MatchStrategy.STRICT:
            return (version or "") == self.host_version
        if self.match == MatchStrategy.CURRENT_OR_OLDER:
            return compare(version, self.host_version) <= 0
        return True

    def describe(self) -> str:
        return (
            f"defaultVersion '{self.host_version}', versionMatchStrategy {self.match},"
            f" versionFailureStrategy {self.failure}"
        )


@dataclass(frozen=True, slots=True)
class Verdict:
    """This host must not run an instance at ``version``: wait (``fail`` False) or fail."""

    version: str
    policy: VersionPolicy
    name: str = ""  # the orchestrator's name, for a status of an instance with no record yet

    @property
    def fail(self) -> bool:
        return self.policy.failure == FailureStrategy.FAIL

    @property
    def reason(self) -> str:
        """One line for logs, statuses and the failure output."""
        return (
            f"{MISMATCH}: {MISMATCH_TEXT}: the instance has version '{self.version}', this host"
            f" runs {self.policy.describe()}"
        )

    def to_status(self, since: str) -> dict[str, Any]:
        """The ``versionBlock`` field of the instance's status (see ``docs/versioning.md``)."""
        return {
            "reason": self.reason,
            "instanceVersion": self.version,
            "hostVersion": self.policy.host_version,
            "versionMatchStrategy": str(self.policy.match),
            "since": since,
        }


def _setting(durable: Mapping[str, Any], environ: Mapping[str, str], name: str) -> Any:
    for key, value in environ.items():
        if key.lower() == (ENV_PREFIX + name).lower():
            return value
    return durable.get(name)


def _choice(value: Any, kind: type[enum.StrEnum], name: str) -> Any:
    for member in kind:
        if str(value).strip().lower() == member.value.lower():
            return member
    allowed = ", ".join(m.value for m in kind)
    raise VersionSettingError(f"{name} {value!r} is not one of {allowed}")


def policy_from(
    durable: Mapping[str, Any], environ: Mapping[str, str] | None = None
) -> VersionPolicy:
    """The policy from host.json's ``extensions.durableTask`` and app-setting overrides."""
    env = environ or {}
    version = _setting(durable, env, "defaultVersion")
    match = _setting(durable, env, "versionMatchStrategy")
    failure = _setting(durable, env, "versionFailureStrategy")
    if version is None and match is None:
        return VersionPolicy(None, MatchStrategy.NONE, _reject_or(failure))
    return VersionPolicy(
        None if version is None else str(version),
        MatchStrategy.CURRENT_OR_OLDER
        if match is None
        else _choice(match, MatchStrategy, "versionMatchStrategy"),
        _reject_or(failure),
    )


def _reject_or(failure: Any) -> FailureStrategy:
    if failure is None:
        return FailureStrategy.REJECT
    return _choice(failure, FailureStrategy, "versionFailureStrategy")


def blocked(
    policy: VersionPolicy,
    status: str | None,
    version: str | None,
    messages: list[dict[str, Any]],
    name: str = "",
) -> Verdict | None:
    """Would these messages make this host run code at a version it must not run?

    ``status``/``version``: the instance record's (None for an instance not created yet, e.g.
    a sub-orchestration whose start is in ``messages``). A start in the batch brings the
    version of the execution it starts.
    """
    if policy.match == MatchStrategy.NONE:
        return None
    kinds = {m.get("kind") for m in messages}
    if MessageKind.TERMINATE in kinds:
        return None
    starts = [m for m in messages if m.get("kind") == MessageKind.START]
    if starts:
        started = starts[-1].get("event") or {}
        version, name = started.get("Version"), started.get("Name") or name
    elif status is None or (status in TERMINAL and MessageKind.REWIND not in kinds):
        return None  # nothing will run: late messages are dropped
    if policy.allows(version):
        return None
    return Verdict(version or "", policy, name)


class Parking:
    """Instances this host left untouched because of their version, and since when.

    A parked instance is not taken again when a scan re-discovers its waiting messages (the
    timer scan, the store's poll): only a new message written through this host (a raised
    event, a terminate, a restart) or ``RECHECK_SECONDS`` later. A host's version does not
    change while it runs, so re-checking sooner would only spend CPU; the slow re-check
    catches what another process changed (e.g. a terminate written by another host). Memory:
    one small entry per parked instance, whatever its history.
    """

    RECHECK_SECONDS = 60.0

    def __init__(self) -> None:
        self._parked: dict[str, tuple[Verdict, str, float]] = {}

    def __len__(self) -> int:
        return len(self._parked)

    def park(self, instance_id: str, verdict: Verdict, at: str, monotonic: float) -> bool:
        """Park (or keep parked); True if the instance was not parked before."""
        known = self._parked.get(instance_id)
        since = known[1] if known else at
        self._parked[instance_id] = (verdict, since, monotonic)
        return known is None

    def release(self, instance_id: str) -> None:
        self._parked.pop(instance_id, None)

    def skips(self, instance_id: str, monotonic: float) -> bool:
        """True while a re-discovered parked instance need not be looked at again."""
        known = self._parked.get(instance_id)
        return known is not None and monotonic - known[2] < self.RECHECK_SECONDS

    def status(self, instance_id: str) -> dict[str, Any] | None:
        known = self._parked.get(instance_id)
        return known[0].to_status(known[1]) if known else None

    def verdict(self, instance_id: str) -> tuple[Verdict, str] | None:
        """The verdict and since when, for an instance parked here."""
        known = self._parked.get(instance_id)
        return (known[0], known[1]) if known else None

    def ids(self) -> list[str]:
        return sorted(self._parked)

    def recent(self, monotonic: float, within: float) -> dict[str, str]:
        """Instance id -> version of those parked (or parked again) in the last ``within``
        seconds: the instances a store that several hosts share hands to a host of their
        version. An older entry may be stale (finished elsewhere): it is parked again when
        its messages are found here once more."""
        return {
            instance_id: verdict.version
            for instance_id, (verdict, _since, at) in self._parked.items()
            if monotonic - at <= within
        }
