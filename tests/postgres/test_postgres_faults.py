"""Faults of the database itself under load: nothing lost, nothing run twice, nothing
quarantined, and the host serving again once the database is back.

The reliability campaigns' ledger app (``tests/reliability/app``): the activities write
every run to a ledger outside the task hub, so a step that ran twice or never is seen,
and the ``tally`` entity must count every orchestration once. The faults are the real
ones: ``pg_ctl restart -m immediate`` (the server crashes and recovers, every
connection breaks, transactions in flight abort) and ``pg_terminate_backend`` of every
session (the host's pool and its LISTEN connection are cut).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.reliability.conftest import APP, check_chain, ledger_runs, submit, tally

CHAINS = 12
STEPS = 3


def run_under(pg_host, tmp_path: Path, prefix: str, fault) -> str:
    ledger = tmp_path / "ledger"
    env = {"RELIABILITY_LEDGER": str(ledger), "DURABLE_HOST_POISON_ATTEMPTS": "2"}
    host = pg_host(app=str(APP), env=env).start(timeout=60)
    keys = [f"{prefix}-{n:03d}" for n in range(CHAINS)]
    for n, key in enumerate(keys):
        submit(host, "ledger_chain", key, {"key": key, "steps": STEPS, "tally": prefix})
        if n in (CHAINS // 3, 2 * CHAINS // 3):
            fault()  # mid-load: some chains are running, some not yet submitted
    for key in keys:
        check_chain(host, key, STEPS)
    runs = ledger_runs(ledger)
    assert set(runs) == {f"{key}:{i}" for key in keys for i in range(STEPS)}, "a step was lost"
    duplicates = {step: n for step, n in runs.items() if n > 1}
    assert duplicates == {}, duplicates
    assert tally(host, prefix) == CHAINS
    log = host.log_path.read_text() if host.log_path else ""
    assert "quarantined" not in log
    return log


def test_a_database_restarted_mid_load_loses_nothing(pg_host, postgres_server, tmp_path):
    started = time.monotonic()
    log = run_under(pg_host, tmp_path, "restart", postgres_server.restart)
    print(
        f"database restarted twice mid-load: {CHAINS} chains x {STEPS} steps, 0 lost,"
        f" 0 duplicated, 0 quarantined in {time.monotonic() - started:.1f}s"
    )
    assert "retrying" in log or "failed" in log, "the restarts were never noticed"


def test_connections_killed_mid_load_lose_nothing(pg_host, postgres_server, tmp_path):
    killed: list[int] = []

    def cut() -> None:
        killed.append(postgres_server.terminate_backends())

    run_under(pg_host, tmp_path, "terminate", cut)
    assert sum(killed) > 0, "no session was terminated"
    print(f"sessions terminated mid-load {killed}: {CHAINS} chains, 0 lost, 0 duplicated")


@pytest.mark.parametrize("app", ["basic"])
def test_the_host_serves_again_after_an_outage_longer_than_its_retries(
    pg_host, postgres_server, tmp_path, app
):
    host = pg_host(app=app, env={"DURABLE_HOST_POSTGRES_RETRY_SECONDS": "1"}).start(timeout=60)
    first = host.start_orchestration("hello_sequence")
    assert host.wait_for_status(first, timeout=60)["runtimeStatus"] == "Completed"
    postgres_server.pg_ctl("stop", "-m", "immediate")
    try:
        refused = host.post("/api/orchestrators/hello_sequence")
        assert refused.status >= 500, refused.body
        assert postgres_server.password.encode() not in refused.body
    finally:
        postgres_server.pg_ctl("start")
    second = wait_started(host)
    assert host.wait_for_status(second, timeout=60)["runtimeStatus"] == "Completed"


def wait_started(host) -> str:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        resp = host.post("/api/orchestrators/hello_sequence")
        if resp.status == 202:
            return str(resp.json()["id"])
        time.sleep(0.5)
    raise AssertionError("the host did not accept a start after the database came back")
