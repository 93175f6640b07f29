"""What the host tells a developer at start-up, the way ``func start`` does: every function
with its trigger and, for HTTP functions and the durable client routes, methods and URL;
and what it will not run, by name, instead of silence.

Also the two start-up checks that belong with that list (pure, given the app index):

* ``--functions a,b``: only those functions are served; a name the app does not define is
  an error (Core Tools ignores it, which hides typos).
* A served function with a binding the host does not implement (a blob input, a queue
  output...) would be called with a parameter missing, so the host refuses to start and
  names the function and the binding; leave the function out with ``--functions`` to serve
  the rest. A function whose *trigger* the host does not run (a queue or blob trigger) is
  only listed as not run: nothing calls it, so serving the others is safe.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from durable_host.functions.loader import AppIndex, FunctionInfo

WEBHOOK = "/runtime/webhooks/durabletask"
# Binding types the host implements, per direction.
SUPPORTED_IN = {
    "httpTrigger",
    "orchestrationTrigger",
    "activityTrigger",
    "entityTrigger",
    "durableClient",
}
SUPPORTED_OUT = {"http"}
TRIGGER_NAMES = {
    "http": "httpTrigger",
    "orchestrator": "orchestrationTrigger",
    "activity": "activityTrigger",
    "entity": "entityTrigger",
}


class SelectionError(Exception):
    """The app or ``--functions`` asks for something the host cannot serve (exit 2)."""


def trigger_type(info: FunctionInfo) -> str:
    found = [b for b in info.bindings if str(b.get("type", "")).lower().endswith("trigger")]
    return str(found[0].get("type")) if found else "(no trigger)"


def unsupported_bindings(info: FunctionInfo) -> list[str]:
    """The binding types of a served function that the host does not implement."""
    out = []
    for binding in info.bindings:
        kind = str(binding.get("type", ""))
        if kind.lower().endswith("trigger"):
            continue  # the trigger decides whether the function runs at all
        direction = str(binding.get("direction", "IN")).upper()
        allowed = SUPPORTED_OUT if direction == "OUT" else SUPPORTED_IN
        if kind not in allowed:
            name = binding.get("name", "?")
            out.append(f"{kind} ({direction.lower()} binding '{name}')")
    return out


def all_functions(index: AppIndex) -> list[FunctionInfo]:
    return [
        *index.http,
        *index.orchestrators.values(),
        *index.activities.values(),
        *index.entities.values(),
        *index.timers,
        *index.other,
    ]


def select(index: AppIndex, names: Iterable[str] | None) -> AppIndex:
    """The index restricted to ``names`` (None: every function), checked for bindings the
    host does not run. Raises ``SelectionError`` with one line naming the problem."""
    wanted = None if names is None else {n.strip() for n in names if n.strip()}
    known = {f.name for f in all_functions(index)}
    if wanted is not None:
        unknown = sorted(wanted - known)
        if unknown:
            raise SelectionError(
                f"--functions names {', '.join(unknown)}, which the app does not define"
                f" (its functions: {', '.join(sorted(known)) or 'none'})"
            )

    def keep(info: FunctionInfo) -> bool:
        return wanted is None or info.name in wanted

    chosen = AppIndex(
        http=[f for f in index.http if keep(f)],
        orchestrators={k: f for k, f in index.orchestrators.items() if keep(f)},
        activities={k: f for k, f in index.activities.items() if keep(f)},
        entities={k: f for k, f in index.entities.items() if keep(f)},
        timers=[f for f in index.timers if keep(f)],
        other=[f for f in index.other if keep(f)],
    )
    for info in all_functions(dataclasses.replace(chosen, other=[])):
        missing = unsupported_bindings(info)
        if missing:
            raise SelectionError(
                f"function '{info.name}' has a binding this host does not run: {missing[0]};"
                " serve the other functions with --functions"
            )
    if wanted is not None:
        for info in chosen.other:
            raise SelectionError(
                f"--functions names '{info.name}', whose trigger {trigger_type(info)} this"
                " host does not run"
            )
    return chosen


def _http_line(info: FunctionInfo, base: str, prefix: str) -> str:
    trigger: dict[str, Any] = info.trigger()
    methods = trigger.get("methods") or ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
    route = str(trigger.get("route") or info.name).strip("/")
    path = f"/{prefix}/{route}" if prefix else f"/{route}"
    return f"{info.name}: [{','.join(m.upper() for m in methods)}] {base}{path}"


def function_lines(index: AppIndex, base: str, route_prefix: str) -> list[str]:
    """The listing: one line per function, then the durable client routes and what is not run."""
    lines = ["Functions:"]
    for info in index.http:
        lines.append("  " + _http_line(info, base, route_prefix) + _disabled(info))
    for info in index.orchestrators.values():
        lines.append(
            f"  {info.name}: orchestrationTrigger"
            f" (start: [POST] {base}{WEBHOOK}/orchestrators/{info.name}){_disabled(info)}"
        )
    for info in index.activities.values():
        lines.append(f"  {info.name}: activityTrigger{_disabled(info)}")
    for key, info in index.entities.items():
        lines.append(
            f"  {info.name}: entityTrigger"
            f" ([GET,POST,DELETE] {base}{WEBHOOK}/entities/{key}/{{key}}){_disabled(info)}"
        )
    for info in index.timers:
        schedule = info.trigger().get("schedule", "")
        lines.append(f"  {info.name}: timerTrigger ({schedule}){_disabled(info)}")
    lines += [
        "Durable client routes:",
        f"  instances: [GET,DELETE] {base}{WEBHOOK}/instances[/{{id}}]",
        (
            f"  actions: [POST] {base}{WEBHOOK}/instances/{{id}}/"
            "{raiseEvent/{name},terminate,suspend,resume,rewind,restart}"
        ),
        f"  dashboard: [GET] {base}/admin/dashboard",
    ]
    for info in index.other:
        lines.append(
            f"not run: function '{info.name}': trigger {trigger_type(info)} is not supported by"
            " this host (docs/host.md lists what it runs)"
        )
    return lines


def _disabled(info: FunctionInfo) -> str:
    return " (disabled)" if info.disabled else ""
