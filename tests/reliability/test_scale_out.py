"""Campaign: several hosts on one shared task hub (Azure Storage or PostgreSQL), one of them
SIGKILLed mid-work.

Three hosts (four with ``DURABLE_RELIABILITY_LONG=1``, which also kills one host per
round for several rounds) serve one hub: each takes its share of the partitions
(``/admin/host/status``), clients start ``ledger_chain`` instances on every host, and
once steps are running the host holding most partitions is SIGKILLed. Its partitions
must be taken by the survivors within the lease, and every chain must finish with one
start, one completion per step and one end; a step may run twice only if its first run
was on the killed host (the ledger names the process of every run). The time from the
kill to each partition's new holder is printed (not asserted: numbers live in bench/).
"""

from __future__ import annotations

import functools
import signal
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.conftest import azure_env, postgres_env
from tests.harness import HostProcess, wait_for
from tests.reliability.conftest import APP, LONG, check_chain, ledger_runs, submit, tally

HOSTS = 4 if LONG else 3
ROUNDS = 5 if LONG else 1
CHAINS = 24 if LONG else 9
STEPS = 12 if LONG else 8
LEASE = 15
LEASES = {"azure": LEASE, "postgres": 5}  # PostgreSQL's expiry is the server's: no margin


def held(host: HostProcess) -> set[int]:
    response = host.get("/admin/host/status")
    return set(response.json()["partitions"]["held"]) if response.status == 200 else set()


def ran_at_least(ledger: Path, steps: int) -> bool:
    return len(ledger_runs(ledger)) >= steps


def ledger_pids(ledger: Path) -> dict[str, set[str]]:
    """Step -> the processes that ran it."""
    pids: dict[str, set[str]] = {}
    if ledger.exists():
        for line in ledger.read_text().splitlines():
            pid, what, step = line.split(" ", 2)
            if what == "run":
                pids.setdefault(step, set()).add(pid)
    return pids


@pytest.mark.timeout(900 if LONG else 300)
def test_hosts_share_a_hub_and_a_killed_hosts_work_resumes_elsewhere(
    store_kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if store_kind not in LEASES:
        pytest.skip("several hosts share only an Azure Storage or PostgreSQL hub")
    campaign(store_kind, tmp_path, request)


def campaign(store_kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """The campaign on a hub of ``store_kind`` (also run by ``tests/postgres``, whose
    private server is there in every run)."""
    lease = LEASES[store_kind]
    ledger = tmp_path / "ledger"
    shared = azure_env if store_kind == "azure" else postgres_env
    env = {
        **shared(request, "scale"),
        "RELIABILITY_LEDGER": str(ledger),
        "DURABLE_HOST_LEASE_SECONDS": str(lease),
    }
    made: list[HostProcess] = []

    def new_host(n: int) -> HostProcess:
        host = HostProcess(APP, store_kind, env=dict(env), log_path=tmp_path / f"host{n}.log")
        made.append(host)
        return host.start(timeout=120)

    with ThreadPoolExecutor(HOSTS) as pool:  # started together, as an autoscaler would
        hosts = list(pool.map(new_host, range(HOSTS)))
    killed: list[str] = []
    takeovers: list[float] = []
    keys: list[str] = []
    try:
        wait_for(
            lambda: all(held(h) for h in hosts) and sum(len(held(h)) for h in hosts) == 4,
            90,
            "every host to hold a share of the partitions",
        )
        scale = hosts[0].get("/admin/host/scale").json()
        assert scale["partitionCount"] == 4
        assert len(scale["hosts"]) == HOSTS
        assert sorted(p for h in scale["hosts"] for p in h["partitions"]) == [0, 1, 2, 3]
        assert hosts[0].post("/admin/host/scale", {}).status == 405

        for round_ in range(ROUNDS):
            batch = [f"r{round_}-{n:03d}" for n in range(CHAINS)]
            keys += batch
            for n, key in enumerate(batch):
                submit(hosts[n % len(hosts)], "ledger_chain", key, {"key": key, "steps": STEPS})
            wait_for(functools.partial(ran_at_least, ledger, len(keys)), 60, "steps to run")
            victim = max(hosts, key=lambda h: len(held(h)))
            lost = held(victim)
            assert victim.process is not None
            killed.append(str(victim.process.pid))
            victim.process.send_signal(signal.SIGKILL)
            victim.process.wait(10)
            died = time.monotonic()
            hosts.remove(victim)
            waiting = set(lost)
            deadline = died + lease + 30
            while waiting and time.monotonic() < deadline:  # bounded by the lease + 30 s
                for unit in list(waiting):
                    if any(unit in held(h) for h in hosts):
                        takeovers.append(time.monotonic() - died)
                        waiting.discard(unit)
                time.sleep(0.2)
            assert not waiting, f"partitions {sorted(waiting)} were not taken over"
            if LONG and round_ < ROUNDS - 1:
                hosts.append(new_host(len(made)))  # a replacement, as an autoscaler would

        for key in keys:
            check_chain(hosts[0], key, STEPS)
        runs = ledger_runs(ledger)
        assert set(runs) == {f"{key}:{i}" for key in keys for i in range(STEPS)}
        pids = ledger_pids(ledger)
        twice = {step: n for step, n in runs.items() if n > 1}
        assert all(pids[step] & set(killed) for step in twice), twice  # only across a kill
        assert len({pid for ran in pids.values() for pid in ran}) > 1  # the work was spread
        assert tally(hosts[0]) == len(keys)
    finally:
        for host in made:
            host.kill()
    print(
        f"scale out: {HOSTS} hosts, {ROUNDS} kills, {len(keys)} chains of {STEPS}, "
        f"{sum(runs.values())} runs, {len(twice)} steps twice (all across a kill), 0 lost; "
        f"partition takeover after SIGKILL p50 {statistics.median(takeovers):.1f}s "
        f"max {max(takeovers):.1f}s (lease {lease}s, {store_kind})"
    )
