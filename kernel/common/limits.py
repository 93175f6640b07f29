"""Per-key concurrency control: singletons, rate limits and debounce. Pure.

A declaration says what to limit and by which key, not how:

    {"key": "service:{service}", "limit": 1}                       # singleton: 1 at a time
    {"key": "mail:{session}", "rate": {"count": 10, "window_s": 60}}   # 10 starts a minute
    {"key": "reindex:{session}", "debounce_s": 30}                 # the last of a burst runs

The key template is filled from the caller's fields (a tool's arguments, its session, its
name). One ``limiter`` entity per filled key (``entities/limiter.py``) keeps the state; this
module is its reducer (``apply``) and the declaration's parser. Time comes from the caller
(``now``, epoch seconds), so the reducer reads no clock.

Operations:
* ``acquire {holder, instance_id, event, first, ...declaration}`` ->
  ``{"granted", "position", "ticket"?, "retry_at"?, "superseded"?}``. ``ticket`` (singleton
  and rate) numbers the requests of a key in the order they arrived, 1, 2, ...; a holder
  keeps the ticket it asked with, so the grants of a key follow the tickets.
  - singleton: at most ``limit`` holders; the excess waits in line, in arrival order; asking
    again keeps one's place (never queued twice), and a holder asking again is granted again
    (harmless). A holder's slot lasts ``lease_s`` from its grant, so a holder that crashed
    gives it back when the lease runs out (``retry_at`` tells a waiter when the first lease
    ends); a waiter that stopped asking (its orchestration
    is gone) leaves the line after ``lease_s``.
  - rate: at most ``count`` grants in any ``window_s``; waiters in line as above,
    ``retry_at`` says when the oldest grant leaves the window.
  - debounce: each first ``acquire`` makes its holder the latest and restarts the quiet
    period; a holder asking again (``first`` false) is granted once the quiet period passed
    if it is still the latest, and told ``superseded`` if a later one came.
* ``release {holder}`` -> ``{"wake": [{"instance_id", "event", "holder"}]}`` (singleton: the
  freed slots go to the first waiters at once; the caller raises their events).
* ``view`` -> the state.
"""

from __future__ import annotations

import copy
import string
from dataclasses import dataclass
from typing import Any

from kernel.common.errors import ValidationError

State = dict[str, Any]
DEFAULT_LEASE_S = 600.0


@dataclass(frozen=True)
class Limit:
    key: str
    mode: str  # singleton | rate | debounce
    limit: int = 1
    count: int = 0
    window_s: float = 0.0
    debounce_s: float = 0.0
    lease_s: float = DEFAULT_LEASE_S

    def request(self) -> dict[str, Any]:
        """The declaration's part of an ``acquire``."""
        return {
            "mode": self.mode,
            "limit": self.limit,
            "count": self.count,
            "window_s": self.window_s,
            "debounce_s": self.debounce_s,
            "lease_s": self.lease_s,
        }


def _number(value: Any, field: str, low: float, integer: bool = False) -> Any:
    ok = isinstance(value, int) if integer else isinstance(value, int | float)
    if not ok or isinstance(value, bool) or value < low:
        kind = "an integer" if integer else "a number"
        raise ValidationError("invalid_limit", f"{field} must be {kind} >= {low}", field)
    return value


def parse_limit(declaration: Any, field: str = "concurrency") -> Limit:
    if not isinstance(declaration, dict):
        raise ValidationError("invalid_limit", f"{field} must be an object", field)
    unknown = set(declaration) - {"key", "limit", "rate", "debounce_s", "lease_s"}
    if unknown:
        name = min(unknown)
        raise ValidationError("invalid_limit", f"unknown field {name!r}", f"{field}.{name}")
    key = declaration.get("key")
    if not isinstance(key, str) or not key.strip() or len(key) > 200:
        raise ValidationError(
            "invalid_limit", "key must be a text of 1-200 characters", f"{field}.key"
        )
    try:
        list(string.Formatter().parse(key))
    except ValueError as exc:
        raise ValidationError("invalid_limit", f"key template: {exc}", f"{field}.key") from exc
    lease = float(_number(declaration.get("lease_s", DEFAULT_LEASE_S), f"{field}.lease_s", 1))
    modes = [m for m in ("limit", "rate", "debounce_s") if m in declaration]
    if len(modes) > 1:
        raise ValidationError(
            "invalid_limit", f"use one of limit, rate, debounce_s; not {modes}", field
        )
    if "rate" in declaration:
        rate = declaration["rate"]
        if not isinstance(rate, dict):
            raise ValidationError("invalid_limit", "rate must be an object", f"{field}.rate")
        count = _number(rate.get("count"), f"{field}.rate.count", 1, integer=True)
        window = float(_number(rate.get("window_s"), f"{field}.rate.window_s", 0.001))
        return Limit(key, "rate", count=count, window_s=window, lease_s=lease)
    if "debounce_s" in declaration:
        quiet = float(_number(declaration["debounce_s"], f"{field}.debounce_s", 0.001))
        return Limit(key, "debounce", debounce_s=quiet, lease_s=lease)
    limit = _number(declaration.get("limit", 1), f"{field}.limit", 1, integer=True)
    return Limit(key, "singleton", limit=limit, lease_s=lease)


def render_key(limit: Limit, fields: dict[str, Any]) -> str:
    """The key with ``{name}`` filled from ``fields``; a missing name is a validation error."""
    try:
        return limit.key.format_map({k: str(v) for k, v in fields.items()})
    except (KeyError, IndexError, ValueError) as exc:
        raise ValidationError(
            "invalid_limit", f"key {limit.key!r} names a field the call has not: {exc}", "key"
        ) from exc


# --- the reducer ---------------------------------------------------------------------------


def new_state() -> State:
    return {
        "holders": {},
        "waiters": [],
        "grants": [],
        "latest": None,
        "quiet_until": 0.0,
        "tickets": 0,
    }


def apply(state: State, op: str, request: dict[str, Any], now: float) -> tuple[State, Any]:
    """One operation on a copy of ``state``: ``(new state, result)``."""
    if op == "view":
        return state, copy.deepcopy(state)
    new = {**new_state(), **copy.deepcopy(state)}
    _expire(new, now)
    if op == "acquire":
        mode = request.get("mode", "singleton")
        if mode == "debounce":
            return new, _debounce(new, request, now)
        return new, _acquire(new, request, now, mode)
    if op == "release":
        return new, _release(new, request, now)
    return state, {"ok": False, "error": f"unknown operation {op!r}"}


def _expire(state: State, now: float) -> None:
    state["holders"] = {h: v for h, v in state["holders"].items() if v["expires_at"] > now}
    state["waiters"] = [w for w in state["waiters"] if w.get("asked_at", now) + w["lease_s"] > now]


def _free(state: State, request: dict[str, Any], now: float, mode: str) -> int:
    if mode == "rate":
        window = float(request.get("window_s") or 1)
        state["grants"] = [t for t in state["grants"] if t > now - window]
        return max(0, int(request.get("count") or 1) - len(state["grants"]))
    return max(0, int(request.get("limit") or 1) - len(state["holders"]))


def _acquire(state: State, request: dict[str, Any], now: float, mode: str) -> dict[str, Any]:
    holder = str(request["holder"])
    lease_s = float(request.get("lease_s") or DEFAULT_LEASE_S)
    state["limit"] = int(request.get("limit") or 1)
    if mode == "singleton" and holder in state["holders"]:
        held = state["holders"][holder]
        state["holders"][holder] = {**held, "expires_at": now + lease_s}
        return {"granted": True, "position": 0, "ticket": held.get("ticket")}
    waiters: list[dict[str, Any]] = state["waiters"]
    place = next((i for i, w in enumerate(waiters) if w["holder"] == holder), None)
    if place is None:
        state["tickets"] = int(state.get("tickets") or 0) + 1
        ticket = state["tickets"]
    else:
        ticket = waiters[place].get("ticket")
    mine = {
        "holder": holder,
        "instance_id": request.get("instance_id"),
        "event": request.get("event"),
        "lease_s": lease_s,
        "asked_at": now,
        "ticket": ticket,
    }
    if place is None:
        waiters.append(mine)
        place = len(waiters) - 1
    else:
        waiters[place] = mine  # a new wait: a new event name, the same place in line
    if place < _free(state, request, now, mode):
        del waiters[place]
        if mode == "rate":
            state["grants"].append(now)
        else:
            state["holders"][holder] = {"expires_at": now + lease_s, "ticket": ticket}
        return {"granted": True, "position": 0, "ticket": ticket}
    answer: dict[str, Any] = {"granted": False, "position": place + 1, "ticket": ticket}
    if mode == "rate" and state["grants"]:
        answer["retry_at"] = min(state["grants"]) + float(request.get("window_s") or 1)
    elif mode == "singleton" and state["holders"]:
        # When the first lease runs out: a crashed holder's slot is free then.
        answer["retry_at"] = min(v["expires_at"] for v in state["holders"].values())
    return answer


def _release(state: State, request: dict[str, Any], now: float) -> dict[str, Any]:
    holder = str(request["holder"])
    state["holders"].pop(holder, None)
    state["waiters"] = [w for w in state["waiters"] if w["holder"] != holder]
    wake = []
    limit = int(state.get("limit") or 1)
    while state["waiters"] and len(state["holders"]) < limit:
        waiter = state["waiters"].pop(0)
        state["holders"][waiter["holder"]] = {
            "expires_at": now + waiter["lease_s"],
            "ticket": waiter.get("ticket"),
        }
        wake.append({k: waiter.get(k) for k in ("instance_id", "event", "holder", "ticket")})
    return {"wake": wake}


def _debounce(state: State, request: dict[str, Any], now: float) -> dict[str, Any]:
    holder = str(request["holder"])
    if request.get("first", True):
        state["latest"] = holder
        state["quiet_until"] = now + float(request.get("debounce_s") or 1)
    elif state["latest"] != holder:
        return {"granted": False, "superseded": True, "position": 0}
    if now >= state["quiet_until"]:
        state["latest"] = None  # the burst's one run: nobody else is granted for it
        return {"granted": True, "position": 0}
    return {"granted": False, "position": 1, "retry_at": state["quiet_until"]}
