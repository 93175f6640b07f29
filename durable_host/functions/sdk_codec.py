"""The SDK's JSON codec without its per-call overheads, computing the same values.

Every Durable Functions payload goes through ``azure.functions._durable_functions``:
``df_loads`` (each completed task's result during a replay, every input) and ``df_dumps``
(every action's input). Two costs there are not the JSON itself:

* ``_is_strict_mode()`` reads ``os.environ["AZURE_FUNCTIONS_DURABLE_STRICT_TYPING"]`` on
  every call (``df_loads`` and ``df_dumps`` each ask once or twice);
* the loose path calls ``json.loads(s, object_hook=...)`` / ``json.dumps(v, default=...)``,
  and a keyword argument makes ``json`` construct a new ``JSONDecoder`` / ``JSONEncoder``
  for every call (the module-level shortcut serves only calls without keywords).

``install`` replaces, through module attributes only (the installed package is not
modified):

* ``_is_strict_mode`` in ``azure.functions._durable_functions`` by a function returning the
  value it returned at install time. Every caller looks the name up in that module's
  globals at call time, so all of them see it. The setting is therefore read once, when
  the host starts - as app settings are on Azure, where changing one restarts the worker.
* the names ``df_loads`` / ``df_dumps`` in every ``azure.durable_functions`` module that
  imported them (``from ..utils.df_serialization import df_loads``) by wrappers that, for
  exactly the cases where the original would run ``json.loads(s, object_hook=hook)``
  (loose mode, no ``expected_type``, a ``str`` without a byte-order mark) or
  ``json.dumps(value, default=hook)`` (loose mode), run one decoder / encoder built once
  with the same hook and the same defaults; every other call goes to the original.
  ``json.loads`` on such a string is ``JSONDecoder(**kw).decode(s)`` and ``json.dumps`` is
  ``JSONEncoder(**defaults, default=hook).encode(value)``, and neither object keeps state
  between calls, so the values and texts are the same. The one-time advisories of the
  original are still emitted (``_notify_no_expected_type``).

Modules the SDK imports later (e.g. its OpenAI Agents integration) keep the originals.
"""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Callable
from typing import Any

_SDK = "azure.functions._durable_functions"
_PACKAGE = "azure.durable_functions"
_saved: dict[str, Any] = {}
_patched: list[tuple[Any, str, Any]] = []  # (module, name, original) to restore


def install(enabled: bool = True) -> bool:
    """Install the cached codec (or restore the originals); True if installed."""
    codec: Any = importlib.import_module(_SDK)  # its attributes are replaced below
    importlib.import_module(_PACKAGE)  # loads the modules whose references are replaced
    _restore(codec)
    if not enabled:
        return False
    strict = codec._is_strict_mode()  # noqa: SLF001 - read once; see the module doc
    _saved.update(
        strict=codec._is_strict_mode,  # noqa: SLF001
        df_loads=codec.df_loads,
        df_dumps=codec.df_dumps,
    )
    codec._is_strict_mode = lambda: strict  # noqa: SLF001
    loads, dumps = _saved["df_loads"], _saved["df_dumps"]
    fast_loads = _fast_loads(codec, loads, strict)
    fast_dumps = _fast_dumps(codec, dumps, strict)
    for name, module in list(sys.modules.items()):
        if module is None or not (name == _PACKAGE or name.startswith(_PACKAGE + ".")):
            continue
        for attribute, original, fast in (
            ("df_loads", loads, fast_loads),
            ("df_dumps", dumps, fast_dumps),
        ):
            if getattr(module, attribute, None) is original:
                _patched.append((module, attribute, original))
                setattr(module, attribute, fast)
    return True


def _restore(codec: Any) -> None:
    for module, attribute, original in _patched:
        setattr(module, attribute, original)
    _patched.clear()
    if "strict" in _saved:
        codec._is_strict_mode = _saved["strict"]  # noqa: SLF001
    _saved.clear()


def _fast_loads(codec: Any, original: Callable[..., Any], strict: bool) -> Callable[..., Any]:
    decoder = json.JSONDecoder(object_hook=codec._deserialize_custom_object)  # noqa: SLF001
    notify = codec._notify_no_expected_type  # noqa: SLF001

    def df_loads(s: Any, expected_type: type | None = None) -> Any:
        if expected_type is None and not strict and type(s) is str and not s.startswith("\ufeff"):
            notify()
            return decoder.decode(s)
        return original(s, expected_type)

    return df_loads


def _fast_dumps(codec: Any, original: Callable[..., Any], strict: bool) -> Callable[..., Any]:
    encoder = json.JSONEncoder(default=codec._serialize_custom_object)  # noqa: SLF001

    def df_dumps(value: Any) -> str:
        if strict:
            return original(value)
        return encoder.encode(value)

    return df_dumps
