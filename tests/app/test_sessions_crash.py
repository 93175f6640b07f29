"""Kill -9 the host around acceptance and around commits; every accepted submission still
completes exactly once, in acceptance order.

The host kills itself at a named fault point (``DURABLE_HOST_FAULTS``), so each test lands in
its window. A client that saw its request answered with 202 does nothing more; a client whose
request died with the host retries it after the restart, with the same ``requestId`` - which is
exactly what idempotent submission is for.
"""

from __future__ import annotations

import http.client
import itertools
from typing import Any

import pytest

from tests.harness import HostProcess, wait_for

pytestmark = pytest.mark.crash

SESSION = "crash"
TEXTS = {"c1": "first of three", "c2": "second of three", "c3": "third of three"}
FINAL = ("completed", "failed", "cancelled")


def try_submit(host: HostProcess, request_id: str, text: str) -> str | None:
    """The submission id when the host answered 202; None when it died before answering."""
    try:
        resp = host.post(
            f"/api/sessions/{SESSION}/submissions",
            {"requestId": request_id, "text": text},
            timeout=10,
        )
    except (OSError, http.client.HTTPException):
        return None
    assert resp.status == 202, resp.body
    return str(resp.json()["submissionId"])


def finished(host: HostProcess, sub_id: str) -> dict[str, Any] | None:
    resp = host.get(f"/api/sessions/{SESSION}/submissions/{sub_id}")
    body = resp.json() if resp.status == 200 else {}
    return body if body.get("status") in FINAL else None


def answer(text: str) -> str:
    return f'You said: "{text}" ({len(text.split())} words).'


def assert_each_ran_once(host: HostProcess, subs: dict[str, str]) -> None:
    done = {
        rid: wait_for(lambda s=sub: finished(host, s), 30, f"{rid} to finish")
        for rid, sub in subs.items()
    }
    state = host.get(f"/api/sessions/{SESSION}").json()
    assert sorted(state["submissions"]) == sorted(subs.values())
    for rid, sub_id in subs.items():
        assert (done[rid]["status"], done[rid]["answer"]) == ("completed", answer(TEXTS[rid]))
        own = [(e["role"], e["text"]) for e in state["entries"] if e["submission_id"] == sub_id]
        assert own == [("user", TEXTS[rid]), ("assistant", answer(TEXTS[rid]))]
        turn = f"{SESSION}:turn:{sub_id}"
        names = [
            i["name"]
            for i in host.get(
                f"/runtime/webhooks/durabletask/instances?instanceIdPrefix={turn}"
            ).json()
        ]
        assert (names.count("agent_turn"), names.count("agent_run")) == (1, 1)
    in_order = sorted(done.values(), key=lambda s: s["entry"])
    for earlier, later in itertools.pairwise(in_order):
        assert later["started_at"] >= earlier["finished_at"]


@pytest.mark.parametrize("faults", [
    "episode.before_commit@1",    # accepted (202), the turn's first step never committed
    "entity.before_commit@1",     # the session's accept batch never committed
    "entity.after_commit@1",      # accept committed, the turn not yet resumed
    "episode.after_commit@3",     # a turn step committed, its messages not yet dispatched
    "entity.after_commit@5",      # a later session commit landed, its caller not resumed
    "activity.before_complete@1", # the model call ran, its result was never recorded
])  # fmt: skip
def test_every_accepted_submission_completes_exactly_once_after_a_kill(
    fresh_kernel_host, faults: str
) -> None:
    host = fresh_kernel_host().start(faults=faults)
    subs = {rid: try_submit(host, rid, text) for rid, text in TEXTS.items()}

    assert host.wait_exit(60) != 0, "the fault point was not reached"
    host.start()
    for rid, sub_id in subs.items():
        subs[rid] = sub_id or try_submit(host, rid, TEXTS[rid])

    assert_each_ran_once(host, {rid: str(sub) for rid, sub in subs.items()})


def test_a_kill_right_after_acceptance_loses_nothing(fresh_kernel_host) -> None:
    host = fresh_kernel_host().start()
    subs = {rid: try_submit(host, rid, text) for rid, text in TEXTS.items()}
    host.kill()

    host.start()

    assert all(subs.values())
    assert_each_ran_once(host, {rid: str(sub) for rid, sub in subs.items()})
