"""Campaign: hosts on one Azure Storage hub under a mixed load, SIGKILLed at random.

Four hosts, each standing for a machine of its own (``DURABLE_HOST_MACHINE_NAME``), serve
one hub (quick: two hosts of one machine, one killed once and not replaced, so the survivor
takes its partitions at its next round). Waves of load arrive through random live
hosts - chains (``w_steps``), fan-out (``w_fan``), entities (``w_entity``), timers
(``w_timer``), events (``w_event``, raised later through another host), sub-orchestrations
(``w_parent``) and continue-as-new (``w_can``) - while a random host is SIGKILLed every
10-30 s (quick: once). Kills alternate between a **restart on the same machine** (a new
host with the dead one's machine name: it releases the dead process's leases at once) and
a **death** (a replacement on a new machine: the dead host's partitions wait for their
leases to lapse). Then the kills stop, everything is driven to its end and checked against
oracles outside the system under test:

* every instance completed with the output computed here and a history with one
  ``ExecutionStarted`` and one ``ExecutionCompleted``;
* every effect is in the ledger (none lost, none unexpected; runs beyond the first counted);
* each entity operation applied once: every ``w_entity`` counter ends at 5 + 7 = 12.

Crash-to-resume, per kill: the time from the SIGKILL to the first new ledger effect of an
instance in one of the dead host's partitions (a thread tails the ledger), printed with
p50/p99 per kind of kill, never asserted. Long (5 min of kills)::

    DURABLE_RELIABILITY_LONG=1 DURABLE_TEST_STORES=azure \\
        python -m pytest -s tests/reliability/test_scale_out_mixed.py
"""

from __future__ import annotations

import os
import random
import signal
import statistics
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from durable_host.cluster.ownership import partition_of
from tests.conftest import azure_env
from tests.harness import WEBHOOK, HostProcess
from tests.reliability.conftest import LONG
from tests.reliability.support import APP, HostDied, alive, call

pytestmark = pytest.mark.crash
HOSTS = 4 if LONG else 2
DURATION_S = float(os.environ.get("RELIABILITY_SCALE_SECONDS", "300" if LONG else "7"))
KILL_EVERY_S = (10.0, 30.0) if LONG else (6.0, 6.0)
WAVE_EVERY_S = 2.0 if LONG else 1.0
LEASE = 15
PARTITIONS = 4  # the walk app's hub keeps the default partitionCount
SEED = int(os.environ.get("RELIABILITY_SEED", "26"))

# kind -> orchestrator, input, expected output, expected effects of instance i
KINDS: dict[str, tuple[str, Any, Any, Any]] = {
    "s": ("w_steps", {"n": 3}, [10, 20, 30], lambda i: {f"{i}:1", f"{i}:2", f"{i}:3"}),
    "f": ("w_fan", {"n": 4}, 60, lambda i: {f"{i}:f{k}" for k in range(4)}),
    "e": ("w_entity", None, 12, lambda i: set()),
    "t": ("w_timer", {"seconds": 2}, 10, lambda i: {i}),
    "v": ("w_event", None, 30, lambda i: {i}),
    "p": ("w_parent", None, 41, lambda i: {f"{i}:child"}),
    "c": ("w_can", {"generation": 0, "last": 2}, 2, lambda i: {f"{i}:gen{g}" for g in range(3)}),
}


def instance_of(key: str) -> str:
    """The instance whose ``effect`` wrote a ledger key (instance ids here have no colon)."""
    return key if key.endswith(":child") else key.split(":", 1)[0]


class Tail(threading.Thread):
    """Timestamps every new ledger line (monotonic clock) as it appears."""

    def __init__(self, path: Path) -> None:
        super().__init__(daemon=True)
        self.path, self.lines = path, []  # type: list[tuple[float, str]]
        self.halt = threading.Event()

    def run(self) -> None:
        offset, rest = 0, ""
        while not self.halt.wait(0.02):
            if not self.path.exists():
                continue
            with open(self.path, encoding="utf-8") as f:
                f.seek(offset)
                chunk = f.read()
                offset = f.tell()
            now = time.monotonic()
            *done, rest = (rest + chunk).split("\n")
            self.lines += [(now, key) for key in done if key]


class Fleet:
    """The live hosts, each with the machine it stands for."""

    def __init__(self, tmp: Path, env: dict[str, str]) -> None:
        self.tmp, self.env = tmp, env
        self.live: list[tuple[HostProcess, str]] = []
        self.made: list[HostProcess] = []

    def start(self, *machines: str) -> None:
        """Start a host per machine, side by side (start-up is most of a quick run)."""
        made = []
        for machine in machines:
            env = {**self.env, "DURABLE_HOST_MACHINE_NAME": machine}
            log = self.tmp / f"host{len(self.made)}.log"
            host = HostProcess(APP, "azure", env=env, log_path=log)
            self.made.append(host)
            made.append((host, machine))
        threads = [threading.Thread(target=h.start, kwargs={"timeout": 120}) for h, _ in made]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(150)
        assert all(alive(h) and h.base_url for h, _ in made), "a host did not start"
        self.live += made

    def any(self, rng: random.Random) -> HostProcess:
        return rng.choice([h for h, _ in self.live if alive(h)])


def held(host: HostProcess) -> set[int]:
    try:
        response = call(host, "GET", "/admin/host/status")
    except HostDied:
        return set()
    return set(response.json()["partitions"]["held"]) if response.status == 200 else set()


def send(fleet: Fleet, rng: random.Random, method: str, path: str, body: Any, ok: set[int]) -> int:
    """One request through a random live host, again through another if one dies or the
    store answers 503; the status, once one of ``ok`` (or 0 after 20 tries)."""
    for _ in range(20):
        try:
            response = call(fleet.any(rng), method, path, body)
        except HostDied:
            continue
        if response.status in ok:
            return response.status
        assert response.status == 503, (path, response.status, response.body)
        time.sleep(0.2)
    return 0


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


@pytest.mark.timeout(1200 if LONG else 120)
def test_hosts_under_mixed_load_and_random_kills_lose_nothing(
    store_kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if store_kind != "azure":
        pytest.skip("several hosts share only an Azure Storage hub")
    rng = random.Random(SEED)
    ledger = tmp_path / "ledger"
    env = {
        **azure_env(request, "mixed"),
        "RELIABILITY_LEDGER": str(ledger),
        "DURABLE_HOST_LEASE_SECONDS": str(LEASE),
    }
    fleet = Fleet(tmp_path, env)
    tail = Tail(ledger)
    instances: dict[str, str] = {}  # instance id -> kind
    events: set[str] = set()  # w_event instances whose "go" is not accepted yet
    kills: list[tuple[str, float, set[int], float]] = []  # (how, when, partitions, up)
    try:
        # Quick: both hosts on one machine, and the survivor takes the dead one's partitions.
        fleet.start(*(f"m{n if LONG else 0}" for n in range(HOSTS)))
        machines = HOSTS
        tail.start()
        begin = time.monotonic()
        next_kill = begin + rng.uniform(*KILL_EVERY_S)
        wave = 0
        while time.monotonic() - begin < DURATION_S:
            for kind, (name, body, _out, _fx) in KINDS.items():
                instance_id = f"{kind}{wave:04d}"
                path = f"{WEBHOOK}/orchestrators/{name}/{instance_id}"
                assert send(fleet, rng, "POST", path, body, {202, 409}), instance_id
                instances[instance_id] = kind
                if kind == "v":
                    events.add(instance_id)
            for instance_id in sorted(events):
                path = f"{WEBHOOK}/instances/{instance_id}/raiseEvent/go"
                if send(fleet, rng, "POST", path, {"value": 3}, {202, 404}) == 202:
                    events.discard(instance_id)
            wave += 1
            if time.monotonic() >= next_kill:
                victim, machine = rng.choice(fleet.live)
                units = held(victim)
                fleet.live.remove((victim, machine))
                assert victim.process is not None
                victim.process.send_signal(signal.SIGKILL)
                victim.process.wait(10)
                killed = time.monotonic()
                how = "restart" if len(kills) % 2 == 0 else "death"
                if not LONG:
                    how = "survived"  # no replacement: the host beside it on its machine
                elif how == "death":
                    machine, machines = f"m{machines}", machines + 1
                if LONG:
                    fleet.start(machine)  # the same machine again, or a replacement elsewhere
                kills.append((how, killed, units, time.monotonic() - killed))
                next_kill = float("inf") if not LONG else next_kill
                if LONG:
                    next_kill = time.monotonic() + rng.uniform(*KILL_EVERY_S)
            time.sleep(WAVE_EVERY_S)

        # The kills stop: drive every instance to its end.
        deadline = time.monotonic() + LEASE * 4 + 60
        while events and time.monotonic() < deadline:
            for instance_id in sorted(events):
                path = f"{WEBHOOK}/instances/{instance_id}/raiseEvent/go"
                if send(fleet, rng, "POST", path, {"value": 3}, {202, 404}) == 202:
                    events.discard(instance_id)
            time.sleep(0.5)
        assert not events, f"events never accepted: {sorted(events)[:5]}"
        lost: list[str] = []
        wrong: list[str] = []
        for instance_id, kind in sorted(instances.items()):
            _name, _body, output, _fx = KINDS[kind]
            found = None
            while time.monotonic() < deadline:
                response = call(fleet.any(rng), "GET", f"{WEBHOOK}/instances/{instance_id}")
                found = response.json() if response.status in (200, 202) else None
                if found and found["runtimeStatus"] in ("Completed", "Failed", "Terminated"):
                    break
                time.sleep(0.1)
            if not found or found["runtimeStatus"] != "Completed":
                lost.append(f"{instance_id}: {found and found['runtimeStatus']}")
                continue
            if found["output"] != output:
                wrong.append(f"{instance_id}: output {found['output']!r}")
            view = call(
                fleet.any(rng), "GET", f"{WEBHOOK}/instances/{instance_id}?showHistory=true"
            ).json()
            history = Counter(e["EventType"] for e in view["historyEvents"])
            if history["ExecutionStarted"] != 1 or history["ExecutionCompleted"] != 1:
                wrong.append(f"{instance_id}: history {dict(history)}")
        tail.halt.set()
        tail.join(5)
        counts = Counter(key for _t, key in tail.lines)
        expected = {k for i, kind in instances.items() for k in KINDS[kind][3](i)}
        lost += [f"effect {k}" for k in sorted(expected) if not counts[k]]
        wrong += [f"unexpected effect {k}" for k in sorted(set(counts) - expected)]
        twice = sum(n - 1 for n in counts.values() if n > 1)
    finally:
        tail.halt.set()
        for host in fleet.made:
            host.kill()

    resume: dict[str, list[float]] = {"restart": [], "death": [], "survived": []}
    startup: list[float] = []  # kill to the restarted host answering
    for how, when, units, up in kills:
        after = [
            t - when
            for t, key in tail.lines
            if t > when and partition_of(instance_of(key), PARTITIONS) in units
        ]
        if after:
            resume[how].append(min(after))
            if how == "restart":
                startup.append(up)
    entities = sum(1 for kind in instances.values() if kind == "e")
    summary = ", ".join(
        f"after a {how} p50 {statistics.median(v):.1f}s p99 {percentile(v, 0.99):.1f}s (n={len(v)})"
        for how, v in resume.items()
        if v
    )
    print(
        f"\nscale out, mixed: {HOSTS} hosts, {DURATION_S:.0f}s, {len(kills)} kills,"
        f" {len(instances)} instances ({entities} entity workflows), {sum(counts.values())}"
        f" effects, {twice} runs beyond the first, lost {len(lost)}, wrong {len(wrong)};"
        f" crash-to-resume {summary or 'not measured'} (lease {LEASE}s)"
        + (
            f"; a restarted host answered {statistics.median(startup):.1f}s after the kill (p50)"
            if startup
            else ""
        )
    )
    assert not lost, lost[:10]
    assert not wrong, wrong[:10]
    assert kills, "no host was killed"
