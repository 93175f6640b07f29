"""Loop control across continue-as-new: every control request is accepted (202, never a 404
while the loop is between two executions) and applied by the loop exactly once.

A loop continues as new at every occurrence and at every control, so control requests sent
in a stream from several clients meet it in every moment: asleep, submitting, racing its
timer, between two executions (``ContinuedAsNew``). The loop shows the count of controls it
applied and an order-free digest of their request ids (``kernel.loops.loop.note_applied``); the
test computes both from what it sent, so a request dropped, or applied twice, shows.

The schedule fires every two seconds, so timers and controls race too (and the session is
not buried under a turn a second in the long run). The default run sends
``CONTROLS`` requests per store; ``DURABLE_RELIABILITY_LONG=1`` sends 1,000
(``DURABLE_LOOP_CONTROLS`` sets the number), across as many executions (docs/testing.md).
Bounded polls only; nothing asserts on durations.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import pytest

from kernel.common import ids
from kernel.loops import loop as loops
from tests.app.test_loops import in_state, loops_of
from tests.harness import HostProcess, wait_for

SESSION = "controlled"
LONG = os.environ.get("DURABLE_RELIABILITY_LONG") == "1"
CONTROLS = int(os.environ.get("DURABLE_LOOP_CONTROLS") or (1000 if LONG else 60))
CLIENTS = 4


@pytest.mark.timeout(120 + CONTROLS)  # the long run: a thousand requests on Azurite
def test_every_control_request_is_applied_once_across_executions(
    kernel_host: HostProcess,
) -> None:
    declaration = {"loopId": "busy", "schedule": "*/2 * * * * *", "prompt": "tick"}
    assert kernel_host.post(f"/api/sessions/{SESSION}/loops", declaration).status == 202
    answers: list[tuple[str, int, Any]] = []
    lock = threading.Lock()

    def client(number: int) -> None:
        for n in range(number, CONTROLS, CLIENTS):
            action = "pause" if n % 2 == 0 else "resume"
            request_id = f"c{n}"
            path = f"/api/sessions/{SESSION}/loops/busy/{action}"
            resp = kernel_host.post(path, {"requestId": request_id})
            with lock:
                answers.append((request_id, resp.status, resp.body))

    clients = [threading.Thread(target=client, args=(k,)) for k in range(CLIENTS)]
    for thread in clients:
        thread.start()
    for thread in clients:
        thread.join()
    refused = [(rid, status, body) for rid, status, body in answers if status != 202]
    assert not refused, refused[:5]
    # A retried request (the same requestId, among the last loops.SEEN_IDS) is the same
    # request: applied once.
    retried = f"c{CONTROLS - 1}"
    again = kernel_host.post(f"/api/sessions/{SESSION}/loops/busy/pause", {"requestId": retried})
    assert again.status == 202
    last = kernel_host.post(f"/api/sessions/{SESSION}/loops/busy/resume", {"requestId": "last"})
    assert last.status == 202

    sent = [rid for rid, _, _ in answers] + ["last"]
    digest = 0
    for request_id in sent:
        digest = loops.control_digest(digest, request_id)
    expected = {"applied": len(sent), "digest": f"{digest:08x}"}

    def settled() -> dict[str, Any] | None:
        loop = loops_of(kernel_host, SESSION).get("busy")
        applied = (loop or {}).get("controls") or {}
        assert applied.get("applied", 0) <= len(sent), applied  # never more than was sent
        return loop if applied == expected and loop and loop["state"] == "sleeping" else None

    wait_for(settled, 60 + CONTROLS / 10, "every control applied once")
    # The loop goes on running its occurrences. Every request raised one wake-up, and the
    # wake-ups of requests already taken still end an execution each (docs/loops.md), so a
    # long stream leaves a queue of them to work off before the timer wins again.
    wait_for(lambda: in_state(kernel_host, "busy", "sleeping", 1, SESSION), 60 + CONTROLS / 4)

    assert kernel_host.request("DELETE", f"/api/sessions/{SESSION}/loops/busy").status == 202
    kernel_host.wait_for_status(ids.validate_instance_id("loop:controlled:busy"))
    assert kernel_host.post(f"/api/sessions/{SESSION}/loops/busy/pause").status == 404
