"""Contract of the attempt ledger port, run against every implementation."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from adapters.attempt_ledger import AttemptLedger, FileAttemptLedger, attempt_state


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def file_ledger(tmp_path: Path, clock: Clock) -> AttemptLedger:
    return FileAttemptLedger(tmp_path / "ledger", clock)


@pytest.fixture(params=[file_ledger], ids=["file"])
def ledger(request: pytest.FixtureRequest, tmp_path: Path, clock: Clock) -> AttemptLedger:
    make: Callable[[Path, Clock], AttemptLedger] = request.param
    return make(tmp_path, clock)


def test_only_the_first_create_wins(ledger):
    assert ledger.create("s:1:0:1", "a", 10) is True
    assert ledger.create("s:1:0:1", "b", 10) is False
    assert ledger.read("s:1:0:1").owner == "a"


def test_the_state_follows_the_lease_and_the_result(ledger, clock):
    assert attempt_state(ledger.read("k"), clock()) == "absent"
    ledger.create("k", "a", 10)
    assert attempt_state(ledger.read("k"), clock()) == "leased"
    clock.now += 11
    assert attempt_state(ledger.read("k"), clock()) == "expired"
    assert ledger.complete("k", {"ok": True}) == {"ok": True}
    assert attempt_state(ledger.read("k"), clock()) == "completed"


def test_a_heartbeat_keeps_the_lease_only_for_its_owner(ledger, clock):
    ledger.create("k", "a", 10)
    clock.now += 8
    assert ledger.renew("k", "a", 10) is True
    assert ledger.renew("k", "b", 10) is False
    clock.now += 8
    assert attempt_state(ledger.read("k"), clock()) == "leased"


def test_only_an_expired_record_can_be_taken_over_and_only_once(ledger, clock):
    ledger.create("k", "a", 10)
    assert ledger.take_over("k", "b", 10, expected_owner="a") is False  # still leased
    clock.now += 11
    assert ledger.take_over("k", "b", 10, expected_owner="a") is True
    assert ledger.take_over("k", "c", 10, expected_owner="a") is False  # b got there first
    record = ledger.read("k")
    assert (record.owner, record.runs) == ("b", 2)


def test_the_first_result_wins(ledger):
    ledger.create("k", "a", 10)
    ledger.complete("k", {"value": 1})
    assert ledger.complete("k", {"value": 2}) == {"value": 1}
    assert ledger.renew("k", "a", 10) is False


def test_keys_with_separators_are_distinct_records(ledger):
    ledger.create("a:b", "x", 10)
    assert ledger.read("a_b") is None
    assert ledger.read("a:b") is not None
