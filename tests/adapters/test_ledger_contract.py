"""Contract of the attempt ledger port, run against every implementation (files; blobs on
Azurite), with real processes racing on one key, and the race campaign of
``bench/ledger_race.py`` in a smaller size (``LEDGER_RACE_ATTEMPTS``, default 100)."""

from __future__ import annotations

import multiprocessing
import os
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from adapters.attempt_ledger import (
    AttemptLedger,
    BlobAttemptLedger,
    FileAttemptLedger,
    LeaseLost,
    attempt_state,
)
from bench import ledger_race
from tests.adapters.conftest import FlakyContainer


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture(params=["file", "blob"])
def spec(request: pytest.FixtureRequest, tmp_path: Path) -> ledger_race.LedgerSpec:
    """Where a ledger lives, in a form another process can open."""
    if request.param == "file":
        return ("file", str(tmp_path / "ledger"))
    connection = request.getfixturevalue("azurite_connection")
    return ("blob", connection, f"t-{uuid.uuid4().hex[:16]}")


@pytest.fixture
def ledger(spec: ledger_race.LedgerSpec, clock: Clock) -> AttemptLedger:
    if spec[0] == "file":
        return FileAttemptLedger(spec[1], clock)
    from adapters import app_state

    return BlobAttemptLedger(app_state.container_client(spec[1], spec[2]), clock)


# --- one process ------------------------------------------------------------------------------


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
    assert ledger.renew("absent", "a", 10) is False


def test_only_an_expired_record_can_be_taken_over_and_only_once(ledger, clock):
    ledger.create("k", "a", 10)
    assert ledger.take_over("k", "b", 10, expected_owner="a") is False  # still leased
    clock.now += 11
    assert ledger.take_over("k", "b", 10, expected_owner="a") is True
    assert ledger.take_over("k", "c", 10, expected_owner="a") is False  # b got there first
    record = ledger.read("k")
    assert (record.owner, record.runs) == ("b", 2)
    assert ledger.take_over("absent", "b", 10, expected_owner="a") is False


def test_the_first_result_wins(ledger):
    ledger.create("k", "a", 10)
    ledger.complete("k", {"value": 1})
    assert ledger.complete("k", {"value": 2}) == {"value": 1}
    assert ledger.complete("k", {"value": 3}, owner="a") == {"value": 1}
    assert ledger.renew("k", "a", 10) is False
    with pytest.raises(KeyError):
        ledger.complete("absent", {"value": 1})


def test_a_lease_that_ran_out_mid_run_is_lost_to_the_take_over(ledger, clock):
    ledger.create("k", "a", 10)
    clock.now += 5
    assert ledger.renew("k", "a", 10) is True
    clock.now += 11  # a stalls: no heartbeat for longer than the lease
    assert ledger.take_over("k", "b", 10, expected_owner="a") is True
    assert ledger.renew("k", "a", 10) is False  # the old owner's heartbeat is refused
    with pytest.raises(LeaseLost):
        ledger.complete("k", {"by": "a"}, owner="a")  # and so is its result
    assert ledger.complete("k", {"by": "b"}, owner="b") == {"by": "b"}
    record = ledger.read("k")
    assert (record.owner, record.runs, record.result) == ("b", 2, {"by": "b"})


def test_keys_with_separators_are_distinct_records(ledger):
    ledger.create("a:b", "x", 10)
    assert ledger.read("a_b") is None
    assert ledger.read("a:b") is not None
    ledger.create("a/b%3A", "y", 10)
    assert ledger.read("a/b%3A").owner == "y"
    assert ledger.read("a/b:") is None


# --- lost answers (blob only: the file ledger has no transient failures) ---------------------


@pytest.fixture
def flaky(request: pytest.FixtureRequest, clock: Clock) -> tuple[BlobAttemptLedger, FlakyContainer]:
    container = FlakyContainer(request.getfixturevalue("blob_container"))
    return BlobAttemptLedger(container, clock), container


@pytest.mark.parametrize("fault", ["lost", "unsent"])
def test_a_write_whose_answer_was_lost_is_decided_by_reading_it_back(flaky, clock, fault):
    ledger, container = flaky
    container.faults = [fault]
    assert ledger.create("k", "a", 10) is True  # not "already exists": it was ours
    container.faults = [fault]
    assert ledger.renew("k", "a", 10) is True
    clock.now += 11
    container.faults = [fault]
    assert ledger.take_over("k", "b", 10, expected_owner="a") is True  # not "owner is b now"
    assert ledger.read("k").runs == 2
    container.faults = [fault, fault]
    assert ledger.complete("k", {"by": "b"}, owner="b") == {"by": "b"}
    assert container.hits == (4 if fault == "lost" else 5)  # a lost write is read back as done
    record = ledger.read("k")
    assert (record.owner, record.runs, record.completed) == ("b", 2, True)


def test_a_lost_create_of_someone_else_is_not_taken_for_ours(flaky):
    ledger, container = flaky
    assert ledger.create("k", "a", 10) is True
    container.faults = ["unsent"]
    assert ledger.create("k", "b", 10) is False
    assert ledger.read("k").owner == "a"


# --- several processes --------------------------------------------------------------------------


def _race(spec: ledger_race.LedgerSpec, action: str, key: str, barrier: Any, results: Any) -> None:
    ledger = ledger_race.open_ledger(spec)
    owner = f"p{os.getpid()}"
    barrier.wait()
    if action == "create":
        won = ledger.create(key, owner, 30)
    else:
        won = ledger.take_over(key, owner, 30, expected_owner="dead")
    results.put((owner, won))


def race(
    spec: ledger_race.LedgerSpec, action: str, key: str, processes: int = 4
) -> list[tuple[str, bool]]:
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(processes), context.Queue()
    workers = [
        context.Process(target=_race, args=(spec, action, key, barrier, results))
        for _ in range(processes)
    ]
    for worker in workers:
        worker.start()
    outcomes = [results.get(timeout=60) for _ in workers]
    for worker in workers:
        worker.join(timeout=10)
    return outcomes


def test_of_processes_creating_one_record_exactly_one_wins(spec):
    outcomes = race(spec, "create", "s:1:0:1")
    winners = [owner for owner, won in outcomes if won]
    assert len(winners) == 1
    assert ledger_race.open_ledger(spec).read("s:1:0:1").owner == winners[0]


def test_of_processes_taking_over_one_expired_record_exactly_one_wins(spec):
    ledger = ledger_race.open_ledger(spec)
    assert ledger.create("s:1:0:1", "dead", -1.0)  # its lease ran out long ago
    outcomes = race(spec, "take_over", "s:1:0:1")
    winners = [owner for owner, won in outcomes if won]
    assert len(winners) == 1
    record = ledger.read("s:1:0:1")
    assert (record.owner, record.runs) == (winners[0], 2)


def _stall_then_finish(spec: ledger_race.LedgerSpec, results: Any, go: Any) -> None:
    """Own a record with a short lease, stall until the test has taken it over, then try to
    renew and to complete."""
    ledger = ledger_race.open_ledger(spec)
    assert ledger.create("k", "slow", 0.5)
    results.put("created")
    # Stalled until the take-over, not for a fixed time: an owner whose lease ran out may
    # still renew until someone else takes the record, so a sleep would race the test.
    assert go.wait(60)
    renewed = ledger.renew("k", "slow", 0.5)
    try:
        ledger.complete("k", {"by": "slow"}, owner="slow")
        completed = True
    except LeaseLost:
        completed = False
    results.put((renewed, completed))


def test_a_process_whose_lease_ran_out_mid_run_cannot_renew_or_complete(spec):
    context = multiprocessing.get_context("spawn")
    results, go = context.Queue(), context.Event()
    slow = context.Process(target=_stall_then_finish, args=(spec, results, go))
    slow.start()
    assert results.get(timeout=60) == "created"
    ledger = ledger_race.open_ledger(spec)
    deadline = time.monotonic() + 30
    while attempt_state(ledger.read("k"), ledger.now()) != "expired":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert ledger.take_over("k", "recovery", 30, expected_owner="slow") is True
    go.set()
    assert results.get(timeout=30) == (False, False)
    slow.join(timeout=10)
    assert ledger.complete("k", {"by": "recovery"}, owner="recovery") == {"by": "recovery"}
    assert ledger.read("k").runs == 2


def test_race_campaign_runs_every_contested_attempt_exactly_once(spec):
    attempts = int(os.environ.get("LEDGER_RACE_ATTEMPTS", "100"))
    result = ledger_race.campaign(spec, attempts, processes=4)
    print(f"\n{spec[0]} ledger race campaign\n{result.table()}")
    # every process read every forced key before any wrote it: all of them tried it
    forced = sum(1 for i in range(attempts) if ledger_race.forced(i))
    assert result.forced == forced > 0
    assert result.contested >= forced
    assert (result.double_runs, result.never_ran, result.bad_records) == (0, 0, 0)
    assert result.ran == attempts
