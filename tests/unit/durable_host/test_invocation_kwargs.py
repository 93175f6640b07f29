"""``invocation.build_kwargs``: the trigger value, a durable client, and the ``context`` of
``azure.functions`` for a function that declares that parameter (asked once per function)."""

from __future__ import annotations

from typing import Any

from durable_host.functions import invocation
from durable_host.functions.loader import FunctionInfo

TRIGGER = {"type": "activityTrigger", "direction": "IN", "name": "value"}
CLIENT = {"type": "durableClient", "direction": "IN", "name": "client"}


def with_context(value: Any, context: Any) -> Any:
    return value


def without_context(value: Any) -> Any:
    return value


def info(fn: Any, *bindings: dict[str, Any]) -> FunctionInfo:
    return FunctionInfo(name=fn.__name__, kind="activity", fn=fn, bindings=(TRIGGER, *bindings))


def test_a_function_with_a_context_parameter_gets_one_named_for_it():
    for _ in range(2):  # the second call takes the cached answer
        kwargs = invocation.build_kwargs(info(with_context), 7, lambda: "{}", "/app")

        assert kwargs["value"] == 7
        assert kwargs["context"].function_name == "with_context"
        assert kwargs["context"].function_directory == "/app"


def test_a_function_without_one_gets_none():
    kwargs = invocation.build_kwargs(info(without_context), 7, lambda: "{}", "/app")

    assert kwargs == {"value": 7}


def test_a_binding_named_context_keeps_its_own_value():
    binding = {**CLIENT, "name": "context"}
    kwargs = invocation.build_kwargs(info(with_context, binding), 7, lambda: '{"c": 1}', "/app")

    assert kwargs["context"] == '{"c": 1}'
