"""Campaign 2: SIGKILL at random moments under a mixed load, for a bounded time.

One host serves the reliability app together with the agent kernel
(``RELIABILITY_WITH_KERNEL=1``). While load keeps arriving - plain orchestrations of every
feature (``walk_app/``) and agent sessions whose turns send five notices through the real mail
service, plus a calculation - the host is killed with SIGKILL every 1-20 s (quick: 1-4 s) and
restarted at once. Then the kills stop, everything is driven to its end, and the outcome is
checked against oracles outside the system under test:

* plain orchestrations: the exact outputs computed here and the ledger the ``effect`` activity
  appends to (every effect at least once, nothing unexpected; runs beyond the first counted);
* sessions: every submission completed, and the mail service's own log shows every recipient
  delivered exactly once (sends it answered as replays of a known operation id are counted).

Lost and wrong must be 0. Crash-to-resume (kill to the first progress the restarted host makes)
is printed with its p50/p99, never asserted. Quick (normal test command): 15 s of kills per store.
Long::

    DURABLE_RELIABILITY_LONG=1 DURABLE_TEST_STORES=sqlite,azure \\
        python -m pytest -s tests/reliability/test_random_kills.py
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
import urllib.request
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.app.conftest import kernel_env
from tests.harness import store_specs
from tests.reliability.conftest import LONG
from tests.reliability.support import (
    HostDied,
    Ledger,
    Verdict,
    alive,
    call,
    check_effects,
    reliability_host,
    start_once,
    status,
    until,
)

pytestmark = pytest.mark.crash
DURATION_S = float(os.environ.get("RELIABILITY_KILL_SECONDS", "600" if LONG else "15"))
KILL_EVERY_S = (1.0, 20.0) if LONG else (1.0, 4.0)
WAVE_EVERY_S = 3.0 if LONG else 1.5  # one more wave of load this often while the kills go on
SEED = int(os.environ.get("RELIABILITY_SEED", "12"))

# name, input, expected output, expected effects of instance i
PLAIN = [
    ("w_steps", {"n": 3}, [10, 20, 30], lambda i: {f"{i}:1", f"{i}:2", f"{i}:3"}),
    ("w_timer", {"seconds": 2}, 10, lambda i: {i}),
    ("w_entity", None, 12, lambda i: set()),
    ("w_parent", None, 41, lambda i: {f"{i}:child"}),
    ("w_can", {"generation": 0, "last": 2}, 2, lambda i: {f"{i}:gen{g}" for g in range(3)}),
]


@dataclass
class Load:
    plain: dict[str, int] = field(default_factory=dict)  # instance id -> index in PLAIN
    sessions: dict[str, list[str]] = field(default_factory=dict)  # session -> recipients
    unconfirmed: set[tuple[str, str]] = field(default_factory=set)  # requests without a 202
    waves: int = 0

    def texts(self, session: str) -> dict[str, str]:
        five = " ".join(self.sessions[session])
        return {"notices": f"send the notice to {five}", "calc": "calculate 6*7"}


def mail(base_url: str, path: str) -> Any:
    with urllib.request.urlopen(base_url + path, timeout=10) as response:
        return json.load(response)


def add_wave(host, load: Load, rng: random.Random) -> None:
    """Start one more wave: a plain orchestration of each kind, and every other wave a session."""
    wave = load.waves
    load.waves += 1
    for index, (name, _, _, _) in enumerate(PLAIN):
        load.plain[f"k{wave}-{name}"] = index
        load.unconfirmed.add(("", f"k{wave}-{name}"))
    if wave % 2 == 0:
        session = f"kill{wave}"
        load.sessions[session] = [f"c{wave}-{n}@example.com" for n in range(1, 6)]
        load.unconfirmed |= {(session, "notices"), (session, "calc")}
    confirm(host, load)
    del rng


def confirm(host, load: Load) -> None:
    """Send every start and submission that has no 202 yet. A start is sent only if its instance
    does not exist; a submission again with its requestId is the client's retry (idempotent)."""
    for session, name in sorted(load.unconfirmed):
        if session == "":
            index = load.plain[name]
            start_once(host, PLAIN[index][0], name, PLAIN[index][1])
        else:
            body = {"requestId": name, "text": load.texts(session)[name]}
            resp = call(host, "POST", f"/api/sessions/{session}/submissions", body)
            assert resp.status == 202, resp.body
        load.unconfirmed.discard((session, name))


def progress(ledger: Ledger, mailbox: str) -> tuple[int, int]:
    """Effects so far, in the ledger and in the mail service's log: what a resume shows first."""
    return sum(ledger.counts().values()), len(mail(mailbox, "/log")["entries"])


def pending(host, load: Load) -> list[str]:
    """What has not ended yet: plain instances (with their status) and open submissions."""
    left = []
    for instance_id in load.plain:
        found = status(host, instance_id)
        if not found or found["runtimeStatus"] not in ("Completed", "Failed", "Terminated"):
            left.append(f"{instance_id}: {found and found['runtimeStatus']}")
    for session in load.sessions:
        resp = call(host, "GET", f"/api/sessions/{session}")
        subs = (
            list((resp.json() or {}).get("submissions", {}).values()) if resp.status == 200 else []
        )
        open_ = [
            s["request_id"] for s in subs if s["status"] not in ("completed", "failed", "cancelled")
        ]
        if len(subs) < 2 or open_:
            left.append(f"{session}: {len(subs)} submissions, open {open_}")
    return left


def finished(host, load: Load) -> bool:
    return not pending(host, load)


def judge(host, load: Load, ledger: Ledger, mailbox: str) -> tuple[Verdict, int]:
    verdict = Verdict()
    expected: set[str] = set()
    for instance_id, index in load.plain.items():
        _, _, output, effects = PLAIN[index]
        found = status(host, instance_id) or {}
        if found.get("runtimeStatus") != "Completed" or found.get("output") != output:
            verdict.wrong.append(
                f"{instance_id}: {found.get('runtimeStatus')} {found.get('output')!r}"
            )
        expected |= effects(instance_id)
    check_effects(ledger.counts(), expected, verdict)
    log = mail(mailbox, "/log")["entries"]
    delivered = Counter(e["to"] for e in log if e["kind"] == "delivery")
    for session, recipients in load.sessions.items():
        state = call(host, "GET", f"/api/sessions/{session}").json()
        for sub in state["submissions"].values():
            if sub["status"] != "completed":
                verdict.wrong.append(f"{session}/{sub['request_id']}: {sub['status']}")
        for recipient in recipients:
            if delivered[recipient] == 0:
                verdict.lost.append(f"mail to {recipient}")
            elif delivered[recipient] > 1:
                verdict.wrong.append(f"{recipient} got {delivered[recipient]} mails")
    # A send the service had already accepted under its operation id: answered, not delivered.
    return verdict, sum(1 for e in log if e["kind"] == "replayed_send")


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


@pytest.mark.timeout(DURATION_S + 900)
@pytest.mark.parametrize("kind", store_specs())
def test_random_kills(
    request: pytest.FixtureRequest, tmp_path: Path, kind: str, mailbox: str
) -> None:
    rng = random.Random(f"{SEED}:{kind}")
    ledger = Ledger(tmp_path / "effects.ledger")
    env = {
        **kernel_env(tmp_path, kind=kind),
        "RELIABILITY_WITH_KERNEL": "1",
        "RELIABILITY_LEDGER": str(ledger.path),
        "AGENT_MAIL_BASE_URL": mailbox,
        "AGENT_LEDGER_CONTAINER": f"ledger-{uuid.uuid4().hex[:12]}",  # used on Azure only
    }
    host = reliability_host(request, kind, tmp_path, "kills", env)
    load = Load()
    resumes: list[float] = []
    kills = 0
    host.start()
    try:
        deadline = time.monotonic() + DURATION_S
        next_kill = time.monotonic() + rng.uniform(*KILL_EVERY_S)
        next_wave = time.monotonic()
        waiting: tuple[float, tuple[int, int]] | None = None  # (killed at, progress then)
        while time.monotonic() < deadline:
            now = time.monotonic()
            try:
                if now >= next_wave:
                    next_wave = now + WAVE_EVERY_S
                    add_wave(host, load, rng)
                confirm(host, load)
            except HostDied:
                pass
            if waiting is not None and progress(ledger, mailbox) != waiting[1]:
                resumes.append(time.monotonic() - waiting[0])
                waiting = None
            if time.monotonic() >= next_kill:
                before = progress(ledger, mailbox)
                host.process.send_signal(signal.SIGKILL)
                killed_at = time.monotonic()
                host.wait_exit(10)
                kills += 1
                host.start()
                # A kill before the last one showed progress is not measured.
                waiting = (killed_at, before)
                next_kill = time.monotonic() + rng.uniform(*KILL_EVERY_S)
            time.sleep(0.1)
        if waiting is not None:  # the last kill: measured if new effects come within 60 s
            settle = time.monotonic() + 60
            while time.monotonic() < settle and progress(ledger, mailbox) == waiting[1]:
                time.sleep(0.1)
            if progress(ledger, mailbox) != waiting[1]:
                resumes.append(time.monotonic() - waiting[0])
        confirm(host, load)
        try:
            until(lambda: finished(host, load), 600 if LONG else 180, "the load to finish")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; still open: {pending(host, load)}") from None
        verdict, mail_duplicates = judge(host, load, ledger, mailbox)
    finally:
        if alive(host):
            host.kill()
    summary = {
        "store": kind,
        "mode": "long" if LONG else "quick",
        "seconds": DURATION_S,
        "kills": kills,
        "orchestrations": len(load.plain),
        "sessions": len(load.sessions),
        "mails": 5 * len(load.sessions),
        "lost": len(verdict.lost),
        "wrong": len(verdict.wrong),
        "activity_duplicates": verdict.duplicates,
        "mail_send_duplicates": mail_duplicates,
        "resumes_measured": len(resumes),
        "resume_p50_s": _round(percentile(resumes, 0.5)),
        "resume_p99_s": _round(percentile(resumes, 0.99)),
    }
    print(f"\nrandom kills: {json.dumps(summary)}")
    out = os.environ.get("RELIABILITY_RESULTS")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / f"random-kills-{kind}.json").write_text(json.dumps(summary, indent=1))
    assert kills > 0
    assert not verdict.lost and not verdict.wrong, (verdict.lost, verdict.wrong)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)
