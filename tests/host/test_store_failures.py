"""A host whose storage fails: passing failures are retried and never make work poison;
a store the host can no longer use stops it with a clear message; bulk purges spare
running instances; queued activities that never started are not re-executions."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from tests.harness import APPS, WEBHOOK, HostProcess, wait_for
from tests.reliability.conftest import APP as LEDGER_APP

ROOT = Path(__file__).resolve().parents[2]


def test_a_bulk_purge_never_removes_a_running_instance(make_host) -> None:
    host = make_host("basic").start()
    running = host.start_orchestration("approval")
    done = host.start_orchestration("hello_sequence")
    host.wait_for_status(running, ("Running",))
    host.wait_for_status(done)

    for query in ("createdTimeFrom=2000-01-01", "createdTimeFrom=2000-01-01&runtimeStatus=Running"):
        response = host.request("DELETE", f"{WEBHOOK}/instances?{query}")
        assert response.status in (200, 404), response.body
        assert host.status(running)["runtimeStatus"] == "Running"

    assert host.status(done) is None  # the terminal one went with the first purge
    host.post(f"{WEBHOOK}/instances/{running}/raiseEvent/approve", "yes")
    assert host.wait_for_status(running)["output"] == {"approved": "yes"}


def test_commits_that_fail_on_a_full_disk_never_make_an_instance_poison(tmp_path: Path) -> None:
    failures = ",".join(f"commit_episode.before@{n}" for n in range(1, 5))
    host = HostProcess(
        APPS / "basic",
        f"sqlite:{tmp_path / 'hub.db'}",
        env={"DURABLE_HOST_STORE_FAULTS": failures, "DURABLE_HOST_POISON_ATTEMPTS": "2"},
    ).start()
    try:
        instance = host.start_orchestration("hello_sequence")

        status = host.wait_for_status(instance, timeout=60)

        assert status["runtimeStatus"] == "Completed", status["output"]
        assert status["output"] == ["Hello Tokyo!", "Hello Seattle!", "Hello London!"]
    finally:
        host.kill()
    log = Path(f"{tmp_path / 'hub.db'}.log").read_text()
    assert "database or disk is full" in log
    assert "cannot rollback" not in log


def test_a_request_that_hits_a_store_error_answers_503_naming_it(tmp_path: Path) -> None:
    host = HostProcess(
        APPS / "basic",
        f"sqlite:{tmp_path / 'hub.db'}",
        env={"DURABLE_HOST_STORE_FAULTS": "create_instance.before@1"},
    ).start()
    try:
        refused = host.post(f"{WEBHOOK}/orchestrators/hello_sequence/first")
        assert refused.status == 503
        assert refused.json()["error"] == "store_unavailable"
        assert "disk is full" in refused.json()["Message"]

        assert host.post(f"{WEBHOOK}/orchestrators/hello_sequence/first").status == 202
        assert host.wait_for_status("first")["runtimeStatus"] == "Completed"
    finally:
        host.kill()


def test_a_removed_database_stops_the_host_with_a_clear_message(tmp_path: Path) -> None:
    database = tmp_path / "hub.db"
    host = HostProcess(APPS / "basic", f"sqlite:{database}").start()
    try:
        first = host.start_orchestration("hello_sequence")
        host.wait_for_status(first)
        database.unlink()

        response = host.post(f"{WEBHOOK}/orchestrators/hello_sequence")

        assert response.status == 503, response.body  # never a 202 into the unlinked file
        assert "was removed" in response.json()["Message"]
        assert host.wait_exit(30) == 2
    finally:
        host.kill()
    log = Path(f"{database}.log").read_text()
    assert "durable host: the task hub database" in log and "was removed" in log


def test_the_host_refuses_to_start_on_a_corrupt_database(tmp_path: Path) -> None:
    database = tmp_path / "hub.db"
    host = HostProcess(APPS / "basic", f"sqlite:{database}").start()
    for _ in range(20):
        host.start_orchestration("hello_sequence", {"pad": "x" * 2000})
    assert host.stop() == 0
    with database.open("r+b") as f:
        f.seek(4096 * 2)
        f.write(b"\x5a" * 4096 * 3)

    started = subprocess.run(
        [
            sys.executable,
            "-m",
            "durable_host",
            "start",
            "--app-dir",
            str(APPS / "basic"),
            "--port",
            "0",
            "--store",
            f"sqlite:{database}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert started.returncode == 2, started.stderr
    assert "durable host: the task hub database" in started.stderr
    assert "is corrupt" in started.stderr
    assert "Traceback" not in started.stderr


def test_queued_activities_that_never_started_are_not_counted_as_reruns(tmp_path: Path) -> None:
    database, gate, ledger = tmp_path / "hub.db", tmp_path / "gate", tmp_path / "ledger"
    gate.touch()
    env = {"RELIABILITY_LEDGER": str(ledger), "RELIABILITY_GATE": str(gate)}
    host = HostProcess(LEDGER_APP, f"sqlite:{database}", env=env).start()
    host.start_orchestration("gated_fan", {"key": "fan", "count": 6}, "fan")

    def counts() -> list[int] | None:
        with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as db:
            found = sorted(r[0] for r in db.execute("SELECT dequeue_count FROM activities"))
        return found if found == [0, 0, 0, 0, 1, 1] else None

    wait_for(counts, 30, "two activities running, four queued (maxConcurrentActivityFunctions 2)")
    host.kill()
    gate.unlink()
    host.start()
    try:
        assert host.wait_for_status("fan")["runtimeStatus"] == "Completed"
        metrics = host.get("/admin/host/metrics").json()

        assert metrics["activity_reruns"] == 2  # the two that had started when the host died
        assert metrics["activity_runs"] == 6
    finally:
        host.kill()


def test_status_is_never_running_once_the_store_is_lost(tmp_path: Path) -> None:
    database = tmp_path / "hub.db"
    host = HostProcess(APPS / "basic", f"sqlite:{database}").start()
    try:
        assert host.get("/admin/host/status").json()["state"] == "Running"
        database.unlink()
        host.post(f"{WEBHOOK}/orchestrators/hello_sequence")
        states = []
        deadline = time.monotonic() + 30
        while host.process is not None and host.process.poll() is None:
            try:
                states.append(host.get("/admin/host/status", timeout=2).json()["state"])
            except OSError:
                break  # the host closed its port
            assert time.monotonic() < deadline, "the host did not stop"
        assert "Running" not in states
    finally:
        host.kill()
