"""The one reader of bounded whole-number and duration settings. Pure: reads a mapping.

``whole_number(env, name, default, low, high)`` is an integer from ``low`` to ``high`` (no
upper bound when ``high`` is None); ``seconds`` the same read as a duration in whole
seconds. Unset or blank is ``default``; anything else is refused with ``error`` (a
``ValueError`` unless the caller names its own type, such as ``ConfigError``) naming the
setting, the value (cut to 40 characters) and the range. Every store, the cluster and the
engine read their numeric settings here, so they are checked and refused alike.
"""

from __future__ import annotations

from collections.abc import Mapping


class ConfigError(Exception):
    """A setting of the host or of the app it runs that cannot be used as written."""


def whole_number(
    env: Mapping[str, str],
    name: str,
    default: int,
    low: int = 0,
    high: int | None = None,
    *,
    unit: str = "",
    error: type[Exception] = ValueError,
) -> int:
    text = env.get(name, "").strip()
    if not text:
        return default
    digits = text[1:] if text[:1] in "+-" else text
    value = int(text) if digits.isdigit() else None
    if value is None or value < low or (high is not None and value > high):
        kind = f"a whole number of {unit}" if unit else "a whole number"
        bound = f"from {low} to {high}" if high is not None else f">= {low}"
        raise error(f"{name}={text[:40]!r} is not {kind} {bound}")
    return value


def seconds(
    env: Mapping[str, str],
    name: str,
    default: float,
    low: int,
    high: int,
    *,
    error: type[Exception] = ValueError,
) -> float:
    """A duration in whole seconds (returned as a float, as the clocks use it)."""
    if not env.get(name, "").strip():
        return default
    return float(whole_number(env, name, 0, low, high, unit="seconds", error=error))
