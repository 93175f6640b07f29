"""Every store implements the whole ``Store`` port: the engine never probes for members."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import pytest

from durable_host.store.base import Store
from durable_host.store.sqlite.store import SqliteStore


def _port_members() -> dict[str, Any]:
    members = {}
    for name, value in vars(Store).items():
        if name.startswith("_"):
            continue
        if inspect.isfunction(value) or isinstance(value, property):
            members[name] = value
    return members


def _store(kind: str) -> Any:
    """A store object, never opened: nothing is read or written."""
    if kind == "sqlite":
        return SqliteStore(Path("unused.db"))
    from durable_host.store.azure import AzureStore

    return AzureStore("UseDevelopmentStorage=true", "PortCheck")


def test_the_port_declares_what_the_engine_calls() -> None:
    members = _port_members()

    assert {"poll", "begin_attempt", "release_activity", "round_trips"} <= set(members)


@pytest.mark.parametrize("kind", ["sqlite", "azure"])
def test_a_store_has_every_member_of_the_port_with_its_signature(kind: str) -> None:
    store, members = _store(kind), _port_members()

    missing = [name for name in members if not hasattr(store, name)]
    mismatched = [
        name
        for name, member in members.items()
        if inspect.isfunction(member)
        and hasattr(store, name)
        and (
            not inspect.iscoroutinefunction(getattr(type(store), name))
            or list(inspect.signature(getattr(type(store), name)).parameters)
            != list(inspect.signature(member).parameters)
        )
    ]

    assert missing == []
    assert mismatched == []
    assert store.round_trips is None or isinstance(store.round_trips, int)
