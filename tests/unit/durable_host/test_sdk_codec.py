"""The cached codec computes what the SDK's df_loads/df_dumps compute."""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Iterator

import pytest
from azure.functions import _durable_functions as codec

from durable_host.functions import sdk_codec

# The submodules (the packages re-export classes under the same names).
executor_module = importlib.import_module(
    "azure.durable_functions.models.TaskOrchestrationExecutor"
)
action_module = importlib.import_module("azure.durable_functions.models.actions.CallActivityAction")


class Point:
    def __init__(self, x: int):
        self.x = x

    @staticmethod
    def to_json(obj: Point) -> dict[str, int]:
        return {"x": obj.x}

    @staticmethod
    def from_json(data: dict[str, int]) -> Point:
        return Point(data["x"])


@pytest.fixture
def installed() -> Iterator[None]:
    assert sdk_codec.install(True)
    yield
    sdk_codec.install(False)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_same_values_and_texts_as_the_sdk(installed):
    fast_loads, fast_dumps = executor_module.df_loads, action_module.df_dumps
    assert fast_loads is not codec.df_loads and fast_dumps is not codec.df_dumps
    sys.modules[__name__].Point = Point  # the hook resolves classes through sys.modules
    values = [None, 1, 2.5, "é\u2028", [1, {"a": [True, None]}], {"b": {"c": "d"}}, Point(3)]
    for value in values:
        text = codec.df_dumps(value)
        assert fast_dumps(value) == text
        slow, fast = codec.df_loads(text), fast_loads(text)
        if isinstance(value, Point):
            assert isinstance(fast, Point) and fast.x == slow.x
        else:
            assert fast == slow and json.dumps(fast) == json.dumps(slow)
    for bad in ("{", "\ufeff1", ""):
        with pytest.raises(ValueError):
            codec.df_loads(bad)
        with pytest.raises(ValueError):
            fast_loads(bad)
    assert fast_loads("[1]", list) == codec.df_loads("[1]", list)


def test_uninstall_restores_the_originals():
    sdk_codec.install(True)
    sdk_codec.install(False)
    assert executor_module.df_loads is codec.df_loads
    assert action_module.df_dumps is codec.df_dumps
    assert codec._is_strict_mode.__name__ == "_is_strict_mode"


def test_strict_mode_is_read_once_and_strict_calls_go_to_the_sdk(monkeypatch):
    monkeypatch.setenv("AZURE_FUNCTIONS_DURABLE_STRICT_TYPING", "1")
    try:
        sdk_codec.install(True)
        monkeypatch.delenv("AZURE_FUNCTIONS_DURABLE_STRICT_TYPING")
        assert codec._is_strict_mode() is True
        envelope = json.dumps({"__class__": "Point", "__module__": __name__, "__data__": {"x": 1}})
        with pytest.raises(TypeError):
            executor_module.df_loads(envelope)  # strict: no expected type, as the SDK raises
    finally:
        sdk_codec.install(False)
    assert codec._is_strict_mode() is False
