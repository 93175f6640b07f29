"""The ``semaphore`` entity: a concurrency singleton that caps holders across all sessions.

Key ``model`` caps concurrent model calls (``AGENT_MAX_CONCURRENT_MODEL_CALLS``). Waiting costs
nothing: a waiter's orchestration sleeps on its own event, raced with a durable timer, and
is woken when a slot frees.

State ``{"limit", "holders": {holder: {"expires_at"}}, "waiters": [{"holder", "instance_id",
"event", "lease_s"}]}``. Operations (every one a pure step, ``apply``):

* ``acquire {holder, instance_id, event, limit, lease_s}`` -> ``{"granted", "position"}``.
  Granted if the holder already holds a slot (so asking again is harmless) or if a slot is free
  for it in line order; otherwise it waits in line (once, keeping its place) and ``event`` -
  a name unique to this wait - is where it will be told.
* ``release {holder}`` -> ``{"wake": [{"instance_id", "event", "holder"}]}``. The freed slots go to
  the first waiters, who become holders at once; the caller raises each ``event`` (the entity
  cannot, so the ``hand_over`` activity does it with a durable client).
* ``view`` -> the state.

A holder's slot lasts ``lease_s`` from its grant: a holder that died without releasing gives its
slot back when the lease runs out, and waiters re-check on their timers, so nothing leaks for
ever.

Time comes from the caller: ``acquire`` and ``release`` carry ``now`` (ISO 8601, the calling
orchestration's ``current_utc_datetime``), so the entity reads no clock of its own - an entity is
orchestration code to the Functions tooling. The entity keeps the latest time it was told
(``clock``) and never goes back in time; a request without ``now`` (from an instance started
before callers sent it) uses that time.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import azure.durable_functions as df

bp = df.Blueprint()
State = dict[str, Any]


def new_state() -> State:
    return {"limit": 1, "holders": {}, "waiters": []}


def apply(state: State, op: str, request: dict[str, Any], now: float) -> tuple[State, Any]:
    """One operation on a copy of ``state``: ``(new state, result)``."""
    new = copy.deepcopy(state)
    _drop_expired(new, now)
    if op == "acquire":
        return new, _acquire(new, request, now)
    if op == "release":
        return new, _release(new, request, now)
    if op == "view":
        return state, copy.deepcopy(state)
    return state, {"ok": False, "error": f"unknown operation {op!r}"}


def _acquire(state: State, request: dict[str, Any], now: float) -> dict[str, Any]:
    holder = str(request["holder"])
    state["limit"] = max(1, int(request.get("limit") or state["limit"]))
    lease_s = float(request.get("lease_s") or 600)
    if holder in state["holders"]:
        state["holders"][holder] = {"expires_at": now + lease_s}
        return {"granted": True, "position": 0}
    waiters: list[dict[str, Any]] = state["waiters"]
    mine = {
        "holder": holder,
        "instance_id": request.get("instance_id"),
        "event": request.get("event"),
        "lease_s": lease_s,
    }
    place = next((i for i, w in enumerate(waiters) if w["holder"] == holder), None)
    if place is None:
        waiters.append(mine)
        place = len(waiters) - 1
    else:
        waiters[place] = mine  # a new wait: a new event name, same place in line
    if place < _free(state):
        del waiters[place]
        state["holders"][holder] = {"expires_at": now + lease_s}
        return {"granted": True, "position": 0}
    return {"granted": False, "position": place + 1}


def _release(state: State, request: dict[str, Any], now: float) -> dict[str, Any]:
    holder = str(request["holder"])
    state["holders"].pop(holder, None)
    state["waiters"] = [w for w in state["waiters"] if w["holder"] != holder]
    wake = []
    while state["waiters"] and _free(state) > 0:
        waiter = state["waiters"].pop(0)
        state["holders"][waiter["holder"]] = {"expires_at": now + waiter["lease_s"]}
        wake.append({k: waiter[k] for k in ("instance_id", "event", "holder")})
    return {"wake": wake}


def _free(state: State) -> int:
    return max(0, state["limit"] - len(state["holders"]))


def _drop_expired(state: State, now: float) -> None:
    state["holders"] = {h: v for h, v in state["holders"].items() if v["expires_at"] > now}


def caller_time(state: State, request: dict[str, Any]) -> float:
    """The caller's ``now`` as epoch seconds, never before the latest time the entity was told."""
    latest = float(state.get("clock") or 0.0)
    told = request.get("now") if isinstance(request, dict) else None
    if not isinstance(told, str):
        return latest
    moment = datetime.fromisoformat(told)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return max(latest, moment.timestamp())


@bp.entity_trigger(context_name="context", entity_name="semaphore")
def semaphore(context: df.DurableEntityContext) -> None:
    state = context.get_state(lambda: None) or new_state()
    request = context.get_input() or {}
    now = caller_time(state, request)
    new, result = apply(state, context.operation_name, request, now)
    if new is not state:
        context.set_state({**new, "clock": now})
    context.set_result(result)
