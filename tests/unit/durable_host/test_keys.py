"""The host's key ring (``durable_host/http/keys.py``) on an in-memory secret store."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from durable_host.http import auth
from durable_host.http import keys as k


class MemorySecrets:
    def __init__(self) -> None:
        self.values: dict[str, str] = {}
        self.swaps = 0
        self.meddle: Any = None  # a change another host makes just before our next swap

    async def get_secret(self, name: str) -> str | None:
        return self.values.get(name)

    async def swap_secret(self, name: str, expected: str | None, value: str) -> bool:
        self.swaps += 1
        if self.meddle is not None:
            meddle, self.meddle = self.meddle, None
            self.values[name] = meddle(self.values[name])
        if self.values.get(name) != expected:
            return False
        self.values[name] = value
        return True


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_matches_compares_every_candidate_and_refuses_odd_input() -> None:
    assert k.matches("abc", ["x", "abc"])
    assert not k.matches("", [""])
    assert not k.matches("ключ", ["abc"])
    assert not k.matches("a" * 300, ["a" * 300])
    assert not k.matches("abc\x00", ["abc"])


def test_keys_are_generated_once_and_shared_through_the_store() -> None:
    store = MemorySecrets()
    first = run(k.Keys(store, {}).load())
    second = run(k.Keys(store, {}).load())

    assert first == second
    assert len(first.master) >= 43 and first.host[k.DEFAULT] and first.system_key()
    assert len({first.master, first.host[k.DEFAULT], first.system_key()}) == 3


def test_settings_fix_keys_without_writing_them() -> None:
    store = MemorySecrets()
    fixed = "F" * 40
    ring = k.Keys(store, {k.MASTER_SETTING: fixed, k.FUNCTION_SETTING: "G" * 40})
    keys = run(ring.load())

    assert keys.master == fixed and keys.host[k.DEFAULT] == "G" * 40
    assert fixed not in store.values[k.SECRET_NAME]
    with pytest.raises(k.KeyChangeError) as refused:
        run(ring.put("host", k.MASTER, None))
    assert refused.value.status == 409
    with pytest.raises(k.KeyConfigError):
        k.Keys(store, {k.MASTER_SETTING: "short"})


def test_a_change_is_redone_over_a_change_made_in_between() -> None:
    store = MemorySecrets()
    ring = k.Keys(store, {})
    run(ring.load())
    other = k.Keys(store, {})

    def add_theirs(text: str) -> str:
        keys = k.KeySet.from_json(text)
        return k.KeySet(
            keys.master, {**keys.host, "theirs": "T" * 40}, keys.system, keys.functions
        ).to_json()

    store.meddle = add_theirs
    value, created = run(ring.put("host", "ours", None))

    both = run(other.load())
    assert created and both.host["ours"] == value and both.host["theirs"] == "T" * 40
    assert run(ring.delete("host", "theirs")) is True
    assert "theirs" not in run(other.load()).host
    with pytest.raises(k.KeyChangeError):
        run(ring.delete("system", k.DURABLE_SYSTEM_KEY))


def test_where_the_host_listens_decides_the_default() -> None:
    assert auth.decide(None, "127.0.0.1")[0] is False
    assert auth.decide(None, "localhost")[0] is False
    assert auth.decide(None, "::1")[0] is False
    assert auth.decide(None, "0.0.0.0")[0] is True
    assert auth.decide(None, "myhost")[0] is True
    assert auth.decide("keys", "127.0.0.1")[0] is True
    off, line = auth.decide("off", "0.0.0.0")
    assert off is False and "OFF" in line
    assert auth.local_address("0.0.0.0") == "127.0.0.1" and auth.authority("::1") == "[::1]"
    assert auth.parse_public_url("https://x.example/p/") == "https://x.example/p"
    for bad in ("ftp://x", "https://x?a=1", "x.example"):
        with pytest.raises(ValueError):
            auth.parse_public_url(bad)


def test_unreadable_stored_keys_stop_the_host_instead_of_being_replaced() -> None:
    store = MemorySecrets()
    store.values[k.SECRET_NAME] = "{not json"

    with pytest.raises(k.KeyConfigError):
        run(k.Keys(store, {}).load())
    assert store.values[k.SECRET_NAME] == "{not json"
