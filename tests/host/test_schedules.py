"""Timer triggers and the wake-up contract, end to end through a real host process.

Every wait is bounded; nothing asserts on durations. Schedules and due times are chosen so
that each test runs a few seconds: a two-second cron for the trigger, a four-second durable
timer for the sleeping instance, and a status written straight into the store for the
missed occurrence (no test waits for a slot to be missed).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from durable_host.core import history as h
from durable_host.functions import config as config_mod
from durable_host.host import open_store
from durable_host.testing import PACKAGE_ROOT
from tests.harness import APPS, HostProcess, store_spec_for, store_specs, wait_for

APP = APPS / "timers"
YEARLY = "0 0 0 1 1 *"  # never due while a test runs


def marks(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def host_for(kind: str, tmp_path: Path, schedule: str, *args: str) -> HostProcess:
    env = {"TICK_SCHEDULE": schedule, "TIMER_APP_MARKS": str(tmp_path / "marks.txt")}
    return HostProcess(APP, store_spec_for(kind, tmp_path), env=env, args=list(args))


def run_cli(host: HostProcess, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **host.env, "PYTHONPATH": str(PACKAGE_ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "durable_host", *args, "--app-dir", str(APP), "--store", host.store],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        cwd=str(PACKAGE_ROOT),
    )


def idle_exit_line(host: HostProcess) -> dict[str, Any]:
    """Wait for the host to exit by itself (0) and return its idle-exit announcement."""
    assert host.process is not None and host.process.stdout is not None
    assert host.wait_exit(60) == 0
    lines = [line for line in host.process.stdout.read().splitlines() if line.startswith("{")]
    assert len(lines) == 1, lines
    return json.loads(lines[0])


def write_status(host: HostProcess, name: str, status: dict[str, Any]) -> None:
    """Write a timer's stored status through the store port, as a host that ran before would."""
    saved = {k: os.environ.get(k) for k in host.env}
    os.environ.update(host.env)
    try:
        store = open_store(host.store, config_mod.load(APP))

        async def body() -> None:
            await store.open()
            try:
                assert await store.swap_schedule(name, None, json.dumps(status))
            finally:
                await store.close()

        asyncio.run(body())
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.mark.parametrize("kind", store_specs())
def test_each_occurrence_runs_once_and_can_start_orchestrations(kind: str, tmp_path: Path) -> None:
    host = host_for(kind, tmp_path, "*/2 * * * * *").start()
    try:
        found = wait_for(lambda: len(marks(tmp_path / "marks.txt")) >= 2, 30, "two ticks")
        assert found
        runs = marks(tmp_path / "marks.txt")
        for run in runs[:2]:
            assert run["past_due"] is False
            last, next_ = h.parse_time(run["status"]["Last"]), h.parse_time(run["status"]["Next"])
            # The next slot after the run: the one 2 s on, or a later one when the run itself
            # came more than 2 s late (a loaded machine), never the same or a past one.
            step = next_ - last
            assert step > timedelta(0) and step % timedelta(seconds=2) == timedelta(0), step
            instance = "tick-" + run["status"]["Last"].replace(":", "-")
            assert host.wait_for_status(instance)["output"]["Last"] == run["status"]["Last"]
    finally:
        assert host.stop() == 0
    occurrences = [run["status"]["Last"] for run in marks(tmp_path / "marks.txt")]
    assert len(occurrences) == len(set(occurrences))  # no occurrence twice


@pytest.mark.parametrize("kind", store_specs())
def test_missed_occurrences_fire_once_past_due_after_a_restart(kind: str, tmp_path: Path) -> None:
    # A host stopped for three hours missed three hourly slots; the next one fires it once.
    now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    missed = now - timedelta(hours=2)
    host = host_for(kind, tmp_path, "0 0 * * * *", "--exit-when-idle", "2")
    write_status(
        host,
        "tick",
        {
            "Last": h.format_time(missed - timedelta(hours=1)),
            "Next": h.format_time(missed),
            "LastUpdated": None,
        },
    )
    host.start()
    announced = idle_exit_line(host)
    runs = marks(tmp_path / "marks.txt")
    assert len(runs) == 1
    assert runs[0]["past_due"] is True
    assert runs[0]["status"]["Last"] == h.format_time(missed)
    following = h.parse_time(runs[0]["status"]["Next"])
    assert following > datetime.now(UTC) - timedelta(minutes=1) and following.minute == 0
    assert announced["timer_triggers"]["tick"] == runs[0]["status"]["Next"]
    # A second start finds nothing missed: no run at all.
    host.start()
    idle_exit_line(host)
    assert len(marks(tmp_path / "marks.txt")) == 1


@pytest.mark.parametrize("kind", store_specs())
def test_a_sleeping_instance_completes_after_the_host_exited_and_was_woken(
    kind: str, tmp_path: Path
) -> None:
    host = host_for(
        kind, tmp_path, YEARLY, "--exit-when-idle", "1", "--wake-file", str(tmp_path / "wake.json")
    )
    host.start()
    short = host.start_orchestration("sleeper", {"seconds": 4}, "short")
    long = host.start_orchestration("sleeper", {"seconds": 3600}, "long")
    announced = idle_exit_line(host)
    assert announced["runnable"] is False
    assert json.loads((tmp_path / "wake.json").read_text()) == announced
    due = h.parse_time(announced["next_wake"])
    assert due == h.parse_time(announced["durable_timer"])
    assert due < datetime.now(UTC) + timedelta(seconds=5)  # the short timer, not the long one
    # The stopped host costs no process; next-wake answers the same from the store.
    asked = run_cli(host, "next-wake")
    assert asked.returncode == 0, asked.stderr
    answer = json.loads(asked.stdout)
    if answer["runnable"]:  # a slow machine: the timer fell due before the question
        assert h.parse_time(answer["next_wake"]) >= due
    else:
        assert answer["next_wake"] == announced["next_wake"]
    # The waker starts the host at the announced time; the instance completes.
    time.sleep(max(0.0, (due - datetime.now(UTC)).total_seconds()))
    host.start()
    assert host.wait_for_status(short)["output"] == "woke"
    assert host.status(long)["runtimeStatus"] == "Running"
    announced = idle_exit_line(host)
    later = h.parse_time(announced["next_wake"])
    assert (
        datetime.now(UTC) + timedelta(minutes=55) < later < datetime.now(UTC) + timedelta(hours=1)
    )


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ({"TICK_SCHEDULE": "61 * * * * *"}, ["'tick'", "schedule", "61"]),
        ({"TICK_SCHEDULE": "0 0 0 30 2 *"}, ["'tick'", "never occurs"]),
        ({"TICK_SCHEDULE": ""}, ["'tick'", "TICK_SCHEDULE"]),
        (
            {"TICK_SCHEDULE": "*/5 * * * * *", "WEBSITE_TIME_ZONE": "Mars/Base"},
            ["WEBSITE_TIME_ZONE", "Mars/Base"],
        ),
    ],
)
def test_a_bad_schedule_or_time_zone_is_refused_at_load(
    env: dict[str, str], words: list[str], tmp_path: Path
) -> None:
    host = HostProcess(
        APP, store_spec_for("sqlite", tmp_path), env={"TIMER_APP_MARKS": str(tmp_path / "m"), **env}
    )
    for command in (["start", "--port", "0"], ["next-wake"]):
        done = run_cli(host, *command)
        assert done.returncode == 2, done
        message = done.stderr.strip().splitlines()[-1]
        assert message.startswith("durable host: ")
        for word in words:
            assert word in message, message
    assert not (tmp_path / "hub.db").exists()  # refused before the store was opened
    assert not (tmp_path / "m").exists()


def test_exit_when_idle_takes_only_a_positive_number(tmp_path: Path) -> None:
    host = host_for("sqlite", tmp_path, YEARLY)
    done = run_cli(host, "start", "--exit-when-idle", "soon")
    assert done.returncode == 2 and "positive number of seconds" in done.stderr


def test_a_wake_file_that_cannot_be_written_is_refused_before_serving(tmp_path: Path) -> None:
    (tmp_path / "plain").write_text("a file, not a folder")
    host = host_for("sqlite", tmp_path, YEARLY)
    for blocked in (tmp_path, tmp_path / "plain" / "wake.json"):
        done = run_cli(host, "start", "--exit-when-idle", "1", "--wake-file", str(blocked))
        assert done.returncode == 2, done
        assert done.stderr.strip().splitlines()[-1].startswith("durable host: --wake-file ")
        assert "listening" not in done.stdout
    assert not (tmp_path / "hub.db").exists()  # refused before the store was opened
    alone = run_cli(host, "start", "--wake-file", str(tmp_path / "wake.json"))
    assert alone.returncode == 2 and "--exit-when-idle" in alone.stderr
