"""Operating the host: poison work, undecodable data, graceful stop, disabled functions.

Real host processes that kill themselves (``os._exit`` in app code) or are stopped with
SIGTERM and started again; idleness is read from the host's work counters, never from timing.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import subprocess
import time
import urllib.error
from pathlib import Path

import pytest

from durable_host.core import history as h
from tests.harness import WEBHOOK, HostProcess, settled, wait_for

DONE = ("Completed", "Failed", "Terminated")


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def settle(
    host: HostProcess, instance_id: str, max_starts: int = 8, timeout: float = 100.0
) -> dict:
    """Start the host again whenever it dies, until ``instance_id`` has finished."""
    deadline = time.monotonic() + timeout
    for _ in range(max_starts):
        if host.process is None or host.process.poll() is not None:
            try:
                host.start()
            except RuntimeError:
                continue  # it died while starting: the poison was picked up at once
        while host.process.poll() is None:
            try:
                status = host.status(instance_id)
            except (urllib.error.URLError, ConnectionError):
                # Refused while still exiting: wait for the exit, or the next round would
                # find it "running" and spend its starts in a few milliseconds.
                with contextlib.suppress(subprocess.TimeoutExpired):
                    host.process.wait(timeout=5)
                break
            if status and status["runtimeStatus"] in DONE:
                return status
            if time.monotonic() > deadline:
                raise AssertionError(f"{instance_id} did not finish within {timeout} s")
            time.sleep(0.05)
    raise AssertionError(f"{instance_id} did not finish within {max_starts} starts")


def assert_idle(host: HostProcess, marks: Path, polls: int = 20) -> None:
    """Nothing runs again once the poison is quarantined: the host's work counters (episodes,
    activity runs, ...) and the app's own record of its calls stay put, with nothing ready
    and nothing running, over ``polls`` metrics reads 0.1 s apart, and the host is alive.
    Counts of work, not seconds of CPU: a loaded machine can only make this slower."""
    calls = lines(marks)
    metrics = settled(host, times=polls)
    assert lines(marks) == calls, "quarantined work ran again"
    assert host.process is not None and host.process.poll() is None
    assert metrics["ready"] == 0 and metrics["running_activities"] == 0


def post_start(host: HostProcess, name: str, instance_id: str, body=None) -> None:
    """Start an instance; the host may die right after answering (poison at work)."""
    try:
        resp = host.post(f"{WEBHOOK}/orchestrators/{name}/{instance_id}", body)
        assert resp.status == 202, resp.body
    except (urllib.error.URLError, ConnectionError):
        pass  # died before the answer reached us: the status tells whether it was accepted


@pytest.fixture
def parity(make_host, tmp_path):
    def factory(**env: str) -> HostProcess:
        return make_host("parity", env={"PARITY_MARKS": str(tmp_path / "marks.txt"), **env})

    return factory


def test_an_orchestrator_that_kills_the_process_every_time_is_quarantined(parity, tmp_path):
    host = parity(DURABLE_HOST_POISON_ATTEMPTS="2").start()
    healthy = host.start_orchestration("hello", {"who": "before"}, "healthy-1")
    host.wait_for_status(healthy)

    post_start(host, "kills_the_host", "poison-orch")
    status = settle(host, "poison-orch")

    assert status["runtimeStatus"] == "Failed"
    assert status["output"].startswith(
        "Orchestrator function 'kills_the_host' failed: quarantined as poison after 2 attempts"
    )
    assert host.status(healthy)["output"] == "hello before"
    after = host.start_orchestration("hello", {"who": "after"}, "healthy-2")
    assert host.wait_for_status(after)["output"] == "hello after"
    assert_idle(host, tmp_path / "marks.txt")


def test_an_activity_that_kills_the_process_every_time_is_quarantined(parity, tmp_path):
    host = parity(DURABLE_HOST_POISON_ATTEMPTS="2").start()

    post_start(host, "activity_kills_the_host", "poison-act")
    status = settle(host, "poison-act")

    assert status["output"].startswith(
        "caught: Activity function 'kill_host' failed: quarantined as poison after 2"
    )
    assert lines(tmp_path / "marks.txt").count("kill_host:poison-act") == 2
    assert_idle(host, tmp_path / "marks.txt")


@pytest.mark.parametrize("store_kind", ["sqlite"], indirect=True)
def test_undecodable_inbox_messages_and_history_rows_fail_only_their_instances(parity, tmp_path):
    host = parity().start()
    for name in ("bad-message", "bad-history", "fine"):
        host.start_orchestration("waiter", instance_id=name)
    for name in ("bad-message", "bad-history", "fine"):
        host.wait_for_status(name, ("Running",))
    assert host.stop() == 0
    db = sqlite3.connect(host.store.removeprefix("sqlite:"))
    with db:
        db.execute("INSERT INTO inbox (instance_id, message) VALUES ('bad-message', '{not json')")
        db.execute("UPDATE history SET event='{broken' WHERE instance_id='bad-history' AND seq=1")
        wake = {
            "kind": "event",
            "event": h.event_raised("2026-01-01T00:00:00.000000Z", "other", None),
        }
        db.execute(
            "INSERT INTO inbox (instance_id, message) VALUES ('bad-history', ?)",
            (json.dumps(wake),),
        )
    db.close()

    host.start()
    bad_message = host.wait_for_status("bad-message", DONE)
    bad_history = host.wait_for_status("bad-history", DONE)
    host.post(f"{WEBHOOK}/instances/fine/raiseEvent/go", "on")

    assert bad_message["runtimeStatus"] == "Failed"
    assert "poison message quarantined: inbox message" in bad_message["output"]
    assert "could not be decoded" in bad_message["output"]
    assert bad_history["runtimeStatus"] == "Failed"
    assert "history event 1 of instance 'bad-history' could not be decoded" in bad_history["output"]
    assert host.wait_for_status("fine")["output"] == "on"
    assert_idle(host, tmp_path / "marks.txt")


@pytest.fixture
def basic(make_host, tmp_path):
    def factory(**env: str) -> HostProcess:
        return make_host("basic", env={"BASIC_APP_MARKS": str(tmp_path / "marks.txt"), **env})

    return factory


def test_sigterm_lets_a_running_activity_finish_and_commit(basic, tmp_path):
    marks = tmp_path / "marks.txt"
    host = basic().start()
    # Well inside the 2 s grace, which also has to cover committing the result.
    instance = host.post("/api/orchestrators/slow_step", 0.5).json()["id"]
    wait_for(lambda: "slow:start:0.5" in lines(marks), 60, "the activity to start")

    assert host.stop() == 0  # SIGTERM; the harness gives a 2 s grace
    assert "slow:end:0.5" in lines(marks)
    host.start()

    assert host.wait_for_status(instance)["output"] == 0.5
    assert lines(marks).count("slow:start:0.5") == 1  # its result was kept: no second run


def test_an_activity_longer_than_the_grace_is_released_and_runs_again_after_restart(
    basic, tmp_path
):
    marks = tmp_path / "marks.txt"
    host = basic(DURABLE_HOST_POISON_ATTEMPTS="1").start()
    # Far longer than the 2 s grace: the SIGTERM goes out only once the test has seen the
    # activity start, and that can take a while on a loaded machine.
    instance = host.post("/api/orchestrators/slow_step", 8.0).json()["id"]
    wait_for(lambda: "slow:start:8.0" in lines(marks), 60, "the activity to start")

    assert host.stop() == 0  # exits after the grace although the thread still sleeps
    assert "slow:end:8.0" not in lines(marks)
    host.start()

    # Released, not counted as a crash: with one attempt allowed it still runs again.
    assert host.wait_for_status(instance, timeout=60)["output"] == 8.0
    assert lines(marks).count("slow:start:8.0") == 2


def test_disabled_functions_are_refused_and_fail_where_called(parity):
    disabled = {
        "AzureWebJobs.hello.Disabled": "true",
        "AzureWebJobs.fails_then_recovers.Disabled": "1",
        "AzureWebJobs.sdk.Disabled": "True",
    }
    host = parity(**disabled).start()

    refused = host.post(f"{WEBHOOK}/orchestrators/hello/disabled-1", {"who": "x"})
    parent = host.start_orchestration("parent_of_failing", instance_id="disabled-parent")
    status = host.wait_for_status(parent)

    assert refused.status == 400
    assert (
        "doesn't exist, is disabled, or is not an orchestrator function"
        in refused.json()["ExceptionMessage"]
    )
    assert host.get(f"{WEBHOOK}/instances/disabled-1").status == 404
    assert status["runtimeStatus"] == "Failed"
    assert "The function 'fails_then_recovers' doesn't exist, is disabled" in status["output"]
    assert host.post("/api/sdk/status_all", {}).status == 404  # a disabled HTTP function
