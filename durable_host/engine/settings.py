"""The engine's settings: its defaults and the environment variables that change them.

Settings a deployment rarely changes come from the environment, like the fault plan:
``DURABLE_HOST_FAST_REPLAY``, ``DURABLE_HOST_SESSIONS``, ``DURABLE_HOST_SESSION_VERIFY``,
``DURABLE_HOST_POISON_ATTEMPTS``, ``DURABLE_HOST_HISTORY_CACHE`` (events),
``DURABLE_HOST_INLINE_EVENTS`` and ``DURABLE_HOST_STEP_COMMIT``. Each reader returns the
default when its variable is unset or empty and raises ``ConfigError`` (naming the variable
and the value) for anything it cannot read, so a typo stops the host at start instead of
quietly running another configuration. Nothing here keeps state.
"""

from __future__ import annotations

import os

from durable_host.core import replay, sessions
from durable_host.functions.config import ConfigError

MAX_ACTIVITY_ATTEMPTS = 5  # default attempts before work is declared poison
INLINE_EVENTS = 64  # default DURABLE_HOST_INLINE_EVENTS (see where it is read)

_FLAGS = {"1": True, "true": True, "yes": True, "on": True}
_FLAGS.update({"0": False, "false": False, "no": False, "off": False})


def env_flag(name: str, default: bool) -> bool:
    """A boolean setting; unset or empty is ``default``, anything unreadable is refused."""
    value = os.environ.get(name, "").strip().lower()
    if not value:
        return default
    if value not in _FLAGS:
        raise ConfigError(f"{name}={value!r} is not a boolean (1/0, true/false, yes/no, on/off)")
    return _FLAGS[value]


def env_int(name: str, default: int) -> int:
    """A non-negative whole-number setting; unset or empty is ``default``."""
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    if not value.isdigit():
        raise ConfigError(f"{name}={value!r} is not a whole number >= 0")
    return int(value)


def session_verify() -> int:
    """``DURABLE_HOST_SESSION_VERIFY``: ``doubling`` (the default: a full replay whenever the
    history doubled since the last one), ``N`` (every Nth episode) or ``0`` (never); see
    sessions.py."""
    name = "DURABLE_HOST_SESSION_VERIFY"
    value = os.environ.get(name, "").strip()
    if value.lower() == "doubling":
        return sessions.VERIFY_DOUBLING
    if value and not value.isdigit():
        raise ConfigError(f"{name}={value!r} is not a whole number >= 0 or 'doubling'")
    return env_int(name, sessions.VERIFY_DOUBLING)


def history_cache(on: bool) -> replay.HistoryCache | None:
    """The history cache the replay optimisations use (none without them)."""
    return replay.HistoryCache(env_int("DURABLE_HOST_HISTORY_CACHE", 20_000)) if on else None
