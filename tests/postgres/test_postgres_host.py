"""The host end to end on PostgreSQL: a real host process, real HTTP, the private server.

The smoke covers what each store must carry (activities, timers, events, entities,
sub-orchestrations); the rest pins what only this store has: a SIGKILLed host restarted
takes its partitions back at once, a host started after another stopped takes the hub's
partitions, and the password never shows in the host's log or its startup errors.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from typing import Any

import pytest

from tests.harness import APPS, ROOT, WEBHOOK, HostProcess, wait_for

EXPECTED = ["Hello Tokyo!", "Hello Seattle!", "Hello London!"]


def run(host: HostProcess, name: str, value: Any = None) -> dict[str, Any]:
    resp = host.post(f"/api/orchestrators/{name}", value)
    assert resp.status == 202, resp.body
    return host.wait_for_status(resp.json()["id"], timeout=60)


def test_smoke_activities_timers_events_entities_and_sub_orchestrations(pg_host, tmp_path):
    host = pg_host(env={"BASIC_APP_MARKS": str(tmp_path / "marks.txt")}).start()

    assert run(host, "hello_sequence")["output"] == EXPECTED
    assert run(host, "fan_out", {"count": 30})["output"] == sum(2 * i for i in range(30))
    assert run(host, "sleeper", 0.5)["output"] == "Hello after sleep!"
    parent = run(host, "parent")
    assert parent["output"] == {"a": EXPECTED, "b": 6}

    waiting = host.start_orchestration("approval")
    assert (
        host.post(f"{WEBHOOK}/instances/{waiting}/raiseEvent/approve", {"by": "ann"}).status == 202
    )
    assert host.wait_for_status(waiting)["output"] == {"approved": {"by": "ann"}}

    key = f"k-{uuid.uuid4().hex[:8]}"
    caller = host.post("/api/orchestrators/counter_caller", key).json()["id"]
    assert host.wait_for_status(caller)["output"] == 11
    state = host.get(f"{WEBHOOK}/entities/counter/{key}")
    assert state.status == 200 and state.json() == 11


def test_a_sigkilled_host_restarted_takes_its_partitions_back_and_finishes_the_work(
    pg_host, tmp_path
):
    marks = tmp_path / "marks.txt"
    host = pg_host(env={"BASIC_APP_MARKS": str(marks)})
    host.start(faults="activity.before_complete@1")
    instance = host.start_orchestration("hello_sequence")
    assert host.wait_exit(30) != 0, "the fault point was not reached"

    host.start(timeout=20)  # the recorded owner is a dead process of this machine: no wait
    assert len(host.get("/admin/host/status").json()["partitions"]["held"]) == 4
    status = host.wait_for_status(instance, timeout=60)

    assert status["output"] == EXPECTED
    runs = marks.read_text().splitlines()
    assert runs.count("say_hello:Tokyo") == 2  # killed after it ran, before its commit
    assert runs.count("say_hello:Seattle") == 1 and runs.count("say_hello:London") == 1


def test_a_host_started_after_another_stopped_takes_every_partition_at_once(pg_host):
    owner = pg_host().start()
    standby = pg_host(env={"DURABLE_HOST_LEASE_SECONDS": "60"})
    instance = run(owner, "hello_sequence")["instanceId"]

    owner.stop()  # a graceful stop hands the partitions back: no lease to wait for
    standby.start(timeout=30)

    assert standby.status(instance)["output"] == EXPECTED
    assert run(standby, "hello_sequence")["output"] == EXPECTED


def test_the_password_never_reaches_the_log(pg_host, postgres_url):
    from psycopg.conninfo import conninfo_to_dict

    password = str(conninfo_to_dict(postgres_url)["password"])
    wrong = postgres_url.replace(password, "not-the-" + password)
    host = pg_host(env={"DURABLE_HOST_POSTGRES": wrong})
    try:
        host.start(timeout=15)
        started = True
    except Exception:  # noqa: BLE001 - the host must refuse to start
        started = False
    assert not started
    log = host.log_path.read_text() if host.log_path and host.log_path.exists() else ""
    assert "password authentication failed" in log or "could not connect" in log, log[-2000:]
    assert password not in log and "not-the-" not in log


def test_the_store_reports_its_round_trips(pg_host):
    host = pg_host().start()
    run(host, "hello_sequence")
    metrics = wait_for(lambda: host.get("/admin/host/metrics").json(), 10, "metrics")
    assert metrics["store_round_trips"] > 0


@pytest.mark.parametrize(
    ("spec", "env", "expected"),
    [
        ("postgres", {}, "needs the DURABLE_HOST_POSTGRES setting"),
        ("postgres:host=h password='pw-open", {}, "not a valid libpq connection string"),
        ("postgres:host=127.0.0.1", {"DURABLE_HOST_POSTGRES_POOL": "0"}, "from 1 to 200"),
    ],
)
def test_a_missing_or_malformed_setting_is_refused_in_one_line(
    spec: str, env: dict[str, str], expected: str, tmp_path
) -> None:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("DURABLE_HOST_POSTGRES")}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "durable_host",
            "start",
            "--port",
            "0",
            "--store",
            spec,
            "--app-dir",
            str(APPS / "basic"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={**clean, **env, "PYTHONPATH": str(ROOT)},
    )
    assert result.returncode == 2, result
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("durable host: "), result.stderr
    assert expected in lines[0]
    assert "pw-open" not in result.stderr
