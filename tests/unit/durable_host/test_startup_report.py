"""The start-up report and checks (pure): what is listed, what --functions keeps, which
bindings stop the start; and local.settings.json's Host section."""

from __future__ import annotations

from pathlib import Path

import pytest

from durable_host.functions import local_settings, startup_report
from durable_host.functions.config import ConfigError
from durable_host.functions.loader import AppIndex, FunctionInfo


def fn(name: str, kind: str, *bindings: dict) -> FunctionInfo:
    return FunctionInfo(name, kind, lambda: None, tuple(bindings))


HTTP = fn(
    "hello",
    "http",
    {
        "type": "httpTrigger",
        "direction": "IN",
        "name": "req",
        "route": "hi/{n}",
        "methods": ["get"],
    },
    {"type": "http", "direction": "OUT", "name": "$return"},
)
CLIENT = fn(
    "starter",
    "http",
    {"type": "httpTrigger", "direction": "IN", "name": "req"},
    {"type": "durableClient", "direction": "IN", "name": "client"},
)
BLOB = fn(
    "archive",
    "http",
    {"type": "httpTrigger", "direction": "IN", "name": "req"},
    {"type": "blob", "direction": "OUT", "name": "out"},
)
QUEUE = fn("drain", "other", {"type": "queueTrigger", "direction": "IN", "name": "m"})
ORCH = fn("flow", "orchestrator", {"type": "orchestrationTrigger", "direction": "IN", "name": "c"})


def index(*infos: FunctionInfo) -> AppIndex:
    out = AppIndex()
    for info in infos:
        if info.kind == "http":
            out.http.append(info)
        elif info.kind == "orchestrator":
            out.orchestrators[info.name.lower()] = info
        else:
            out.other.append(info)
    return out


def test_a_served_function_with_an_unsupported_binding_stops_the_start() -> None:
    with pytest.raises(
        startup_report.SelectionError, match="function 'archive'.*blob \\(out binding 'out'\\)"
    ):
        startup_report.select(index(HTTP, BLOB), None)


def test_functions_leaves_the_unsupported_one_out_and_keeps_the_rest() -> None:
    chosen = startup_report.select(index(HTTP, CLIENT, BLOB, QUEUE, ORCH), ["hello", "flow"])

    assert [f.name for f in chosen.http] == ["hello"]
    assert list(chosen.orchestrators) == ["flow"] and chosen.other == []


def test_functions_refuses_unknown_names_and_triggers_not_run() -> None:
    with pytest.raises(startup_report.SelectionError, match="--functions names nope"):
        startup_report.select(index(HTTP), ["hello", "nope"])
    with pytest.raises(startup_report.SelectionError, match="'drain'.*queueTrigger"):
        startup_report.select(index(HTTP, QUEUE), ["drain"])


def test_the_listing_names_methods_urls_and_what_is_not_run() -> None:
    lines = startup_report.function_lines(index(HTTP, ORCH, QUEUE), "http://h:1", "api")

    assert "  hello: [GET] http://h:1/api/hi/{n}" in lines
    assert any(
        line.startswith("  flow: orchestrationTrigger (start: [POST] http://h:1/runtime/")
        for line in lines
    )
    assert lines[-1].startswith("not run: function 'drain': trigger queueTrigger")


def test_the_host_section_of_local_settings() -> None:
    path = Path("local.settings.json")
    parsed = local_settings.parse(
        path, {"LocalHttpPort": "7072", "CORS": "http://a, http://b/", "CORSCredentials": "true"}
    )

    assert parsed == local_settings.LocalHost(7072, ("http://a", "http://b"), True)
    assert local_settings.parse(path, None) == local_settings.LocalHost()
    for bad, field in [
        ({"LocalHttpPort": 70000}, "LocalHttpPort"),
        ({"CORS": 5}, "CORS"),
        ({"CORSCredentials": "maybe"}, "CORSCredentials"),
        ([], "Host"),
    ]:
        with pytest.raises(ConfigError, match=field):
            local_settings.parse(path, bad)
