"""Campaign: transient storage faults. Nothing lost, nothing run twice, nothing quarantined.

A share of the store's calls fails - before the write (nothing applied) or after it (the
write applied, the answer is an error) - and, on SQLite, the disk is full for seconds.
Every orchestration must complete with the output this test computes by itself, the
ledger (written by the activities, outside the task hub) must show every step exactly
once, and the ``tally`` entity must count every orchestration once.

Quick subset: 8 chains per fault rate and store. ``DURABLE_RELIABILITY_LONG=1``: 60 chains
per rate and three seeds (``docs/reliability.md`` has the command and the last results).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.harness import HostProcess, store_spec_for
from tests.reliability.conftest import APP, LONG, check_chain, ledger_runs, submit, tally

CHAINS = 60 if LONG else 8
STEPS = 4 if LONG else 3
SEEDS = (1, 2, 3) if LONG else (1,)
FULL_DISK_SECONDS = 3.0  # how long the disk stays full (the fault, not an assertion)


def fault_env(store_kind: str, rate: int, seed: int) -> dict[str, str]:
    if store_kind == "sqlite":
        plan = f"*.before%{rate},*.after%{rate}"
        return {"DURABLE_HOST_STORE_FAULTS": plan, "DURABLE_HOST_FAULT_SEED": str(seed)}
    points = ("request", "commit", "complete", "send", "stage")
    plan = ",".join(f"{point}%{rate}" for point in points)
    return {"DURABLE_HOST_AZURE_FAULTS": plan, "DURABLE_HOST_FAULT_SEED": str(seed)}


def run_chains(host: HostProcess, ledger: Path, prefix: str) -> dict[str, int]:
    keys = [f"{prefix}-{n:03d}" for n in range(CHAINS)]
    for key in keys:
        submit(host, "ledger_chain", key, {"key": key, "steps": STEPS, "tally": prefix})
    for key in keys:
        check_chain(host, key, STEPS)
    runs = ledger_runs(ledger)
    expected = {f"{key}:{i}" for key in keys for i in range(STEPS)}
    assert set(runs) == expected, "a step never ran, or an unknown one did"
    duplicates = sum(n - 1 for n in runs.values())
    assert duplicates == 0, {step: n for step, n in runs.items() if n > 1}
    assert tally(host, prefix) == CHAINS
    return {"runs": sum(runs.values()), "duplicates": duplicates}


def faults_fired(host: HostProcess) -> int:
    assert host.log_path is not None
    return host.log_path.read_text().count("fault injection:")


@pytest.mark.parametrize("rate", [1, 5])
@pytest.mark.parametrize("seed", SEEDS)
def test_transient_store_faults_lose_nothing(
    store_kind: str, rate: int, seed: int, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    env = {"RELIABILITY_LEDGER": str(ledger), **fault_env(store_kind, rate, seed)}
    host = HostProcess(APP, store_spec_for(store_kind, tmp_path, "hub"), env=env).start()
    try:
        result = run_chains(host, ledger, f"r{rate}s{seed}")
        fired = faults_fired(host)
    finally:
        host.kill()
    print(
        f"storage faults {store_kind} {rate}% seed {seed}: {CHAINS} chains, {fired} faults, "
        f"{result['runs']} runs, {result['duplicates']} duplicates, 0 lost"
    )


def test_store_errors_that_reach_the_engine_never_quarantine(
    store_kind: str, tmp_path: Path
) -> None:
    """Errors the store cannot ride out itself reach the engine (SQLite: every one; Azure:
    with no retry budget). With poison declared after two attempts, one store
    error too many per episode would quarantine it if store errors counted."""
    ledger = tmp_path / "ledger"
    if store_kind == "sqlite":
        faults = {"DURABLE_HOST_STORE_FAULTS": "*.before%20"}
    else:
        faults = {"DURABLE_HOST_AZURE_FAULTS": "request%5", "DURABLE_HOST_AZURE_RETRY_SECONDS": "0"}
    env = {"RELIABILITY_LEDGER": str(ledger), "DURABLE_HOST_POISON_ATTEMPTS": "2", **faults}
    host = HostProcess(APP, store_spec_for(store_kind, tmp_path, "hub"), env=env).start()
    try:
        result = run_chains(host, ledger, "engine")
        log = host.log_path.read_text() if host.log_path else ""
        reached = log.count("not counted as an attempt")
        assert "quarantined" not in log
    finally:
        host.kill()
    print(
        f"store errors at the engine {store_kind}: {CHAINS} chains, {reached} episode "
        f"retries, {result['runs']} runs, {result['duplicates']} duplicates, 0 lost"
    )


def test_a_disk_full_for_seconds_loses_nothing(store_kind: str, tmp_path: Path) -> None:
    if store_kind != "sqlite":
        pytest.skip("a full disk is the embedded store's; Azure outages: test_azure_fencing.py")
    ledger, switch = tmp_path / "ledger", tmp_path / "disk-full"
    env = {"RELIABILITY_LEDGER": str(ledger), "DURABLE_HOST_STORE_FULL": str(switch)}
    host = HostProcess(APP, store_spec_for(store_kind, tmp_path, "hub"), env=env).start()
    try:
        keys = [f"full-{n:03d}" for n in range(CHAINS)]
        for key in keys[: CHAINS // 2]:
            submit(host, "ledger_chain", key, {"key": key, "steps": STEPS, "tally": "full"})
        switch.touch()
        refused = host.post(
            "/runtime/webhooks/durabletask/orchestrators/ledger_chain/refused",
            {"key": "refused", "steps": 1, "tally": "x"},
        )
        time.sleep(FULL_DISK_SECONDS)
        switch.unlink()
        for key in keys[CHAINS // 2 :]:
            submit(host, "ledger_chain", key, {"key": key, "steps": STEPS, "tally": "full"})
        for key in keys:
            check_chain(host, key, STEPS)
        runs = ledger_runs(ledger)
        assert set(runs) == {f"{key}:{i}" for key in keys for i in range(STEPS)}
        assert max(runs.values()) == 1
        assert tally(host, "full") == CHAINS
        assert refused.status == 503 and "full" in refused.json()["Message"]
        log = host.log_path.read_text() if host.log_path else ""
        assert "quarantined" not in log and "cannot rollback" not in log
    finally:
        host.kill()
    print(
        f"disk full {FULL_DISK_SECONDS}s: {CHAINS} chains, {sum(runs.values())} runs, "
        "0 duplicates, 0 lost"
    )
