"""Import an app's ``function_app.py`` once and index its functions by trigger kind.

Like the Python worker: the module must hold exactly one ``FunctionRegister``
(``df.DFApp`` or ``func.FunctionApp``), whose ``get_functions()`` is called once (it is
not idempotent). Durable names are case-insensitive: orchestrators and activities by
their binding's ``orchestration``/``activity`` property or function name, entities by
``entityName`` lowercased. ``AzureWebJobs.<name>.Disabled`` (true/1) disables a function.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import azure.functions as func


class AppLoadError(Exception):
    pass


@dataclass(frozen=True, slots=True)
class FunctionInfo:
    name: str
    kind: str  # http | orchestrator | activity | entity | timer | other
    fn: Callable[..., Any]
    bindings: tuple[dict[str, Any], ...]
    disabled: bool = False

    def trigger(self) -> dict[str, Any]:
        return next(b for b in self.bindings if b.get("type", "").lower().endswith("trigger"))

    def binding_of(self, kind: str) -> dict[str, Any] | None:
        return next((b for b in self.bindings if b.get("type") == kind), None)


@dataclass(slots=True)
class AppIndex:
    http: list[FunctionInfo] = field(default_factory=list)
    orchestrators: dict[str, FunctionInfo] = field(default_factory=dict)
    activities: dict[str, FunctionInfo] = field(default_factory=dict)
    entities: dict[str, FunctionInfo] = field(default_factory=dict)
    timers: list[FunctionInfo] = field(default_factory=list)  # timer_triggers.py runs them
    # functions whose trigger this host does not run (listed at start-up, never served)
    other: list[FunctionInfo] = field(default_factory=list)

    def orchestrator(self, name: str) -> FunctionInfo | None:
        return self.orchestrators.get(name.lower())

    def activity(self, name: str) -> FunctionInfo | None:
        return self.activities.get(name.lower())

    def entity(self, name: str) -> FunctionInfo | None:
        return self.entities.get(name.lower())


_KINDS = {
    "httpTrigger": ("http", None),
    "orchestrationTrigger": ("orchestrator", "orchestration"),
    "activityTrigger": ("activity", "activity"),
    "entityTrigger": ("entity", "entityName"),
    "timerTrigger": ("timer", None),
}


def _is_disabled(name: str) -> bool:
    value = os.environ.get(f"AzureWebJobs.{name}.Disabled", "")
    return value.strip().lower() in ("1", "true")


def load_app(app_dir: Path, module_name: str = "function_app") -> AppIndex:
    app_dir = Path(app_dir).resolve()
    path = app_dir / f"{module_name}.py"
    if not path.is_file():
        raise AppLoadError(f"{path} not found: the app directory must contain {module_name}.py")
    if str(app_dir) not in sys.path:
        sys.path.insert(0, str(app_dir))
    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise AppLoadError(f"importing {path} failed: {exc!r}") from exc
    apps = [v for v in vars(module).values() if isinstance(v, func.FunctionRegister)]
    if len(apps) != 1:
        raise AppLoadError(f"{path} must define exactly one FunctionApp/DFApp, found {len(apps)}")
    return index_functions(apps[0])


def index_functions(app: func.FunctionRegister) -> AppIndex:
    index = AppIndex()
    for function in app.get_functions():
        bindings = tuple(json.loads(b) for b in function.get_raw_bindings())
        name = function.get_function_name()
        assert name is not None  # the SDK names every function it lists
        trigger: dict[str, Any] = next(
            (b for b in bindings if b.get("type", "").lower().endswith("trigger")), {}
        )
        kind, alias_key = _KINDS.get(trigger.get("type", ""), ("other", None))
        info = FunctionInfo(name, kind, function.get_user_function(), bindings, _is_disabled(name))
        durable_name = (trigger.get(alias_key) if alias_key else None) or name
        if kind == "http":
            index.http.append(info)
        elif kind == "orchestrator":
            index.orchestrators[durable_name.lower()] = info
        elif kind == "activity":
            index.activities[durable_name.lower()] = info
        elif kind == "entity":
            index.entities[durable_name.lower()] = info
        elif kind == "timer":
            index.timers.append(info)
        else:
            index.other.append(info)
    return index
