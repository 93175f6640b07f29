"""History retention (``AGENT_HISTORY_RETENTION``): settled submissions' histories are purged
by a later submission's turn; what users read stays; nothing open is touched; a crash in the
middle of a purge is finished after the restart."""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import pytest

from kernel.session import retention
from kernel.session.retention import Instance
from tests.app.turn_support import (
    ModelServer,
    custom_status,
    submission,
    submit,
    view,
    wait_final,
)
from tests.harness import WEBHOOK, HostProcess, wait_for

PLAN = "calculate 2+3 and then remember n: five"


@pytest.fixture
def model() -> Iterator[ModelServer]:
    server = ModelServer().start()
    yield server
    server.stop()


def instances(host: HostProcess, prefix: str) -> list[str]:
    query = urllib.parse.urlencode({"instanceIdPrefix": prefix, "showInput": "false"})
    return sorted(s["instanceId"] for s in host.get(f"{WEBHOOK}/instances?{query}").json() or [])


def owned(host: HostProcess, session: str, sub: str) -> list[str]:
    """The instances of one submission: its turn, everything under it, its tool tasks."""
    return instances(host, f"{session}:turn:{sub}") + instances(host, f"{sub}:")


def turn_done(host: HostProcess, session: str, sub: str) -> dict:
    """The turn's status once it has ended (its retention pass is its last step)."""
    return host.wait_for_status(f"{session}:turn:{sub}", ("Completed",), timeout=60)


def two_submissions(host: HostProcess, session: str) -> tuple[str, str]:
    first = submit(host, session, PLAN, request_id="r1")
    wait_final(host, session, first, timeout=60)
    turn_done(host, session, first)
    second = submit(host, session, "calculate 4*5", request_id="r2")
    wait_final(host, session, second, timeout=60)
    turn_done(host, session, second)
    return first, second


# --- the setting ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "seconds"),
    [("0", 0), ("90", 90), ("90s", 90), ("30m", 1800), ("12h", 43200), ("7d", 604800),
     (" 2D ", 172800), (None, 604800), ("", 604800)],
)  # fmt: skip
def test_a_retention_is_off_or_a_whole_number_with_a_unit(raw, seconds):
    assert retention.parse_retention(raw) == timedelta(seconds=seconds)
    assert retention.parse_retention("off") is None
    assert retention.parse_retention(" OFF ") is None


@pytest.mark.parametrize("raw", ["soon", "-1", "1.5h", "7 days", "1w", "3651d", "0x10", "on"])
def test_a_bad_retention_is_refused_naming_the_setting_and_the_forms(raw):
    with pytest.raises(retention.RetentionSettingsError) as refused:
        retention.parse_retention(raw)
    assert "AGENT_HISTORY_RETENTION" in str(refused.value)
    assert repr(raw) in str(refused.value)


# --- the decisions ----------------------------------------------------------------------------

NOW = datetime(2026, 1, 2, tzinfo=UTC)


def ended(instance_id: str, status: str = "Completed", age_s: int = 60) -> Instance:
    moment = NOW - timedelta(seconds=age_s)
    return Instance(instance_id, status, moment, moment)


def test_only_ended_turns_of_settled_submissions_past_the_cutoff_are_chosen():
    state = {
        "submissions": {
            "a": {"status": "completed"},
            "b": {"status": "active"},  # its turn was terminated: the session still needs it
            "c": {"status": "completed"},
            "q": {"status": "queued"},
        }
    }
    turns = [
        ended("s:turn:c", age_s=30),
        ended("s:turn:a", age_s=90),
        ended("s:turn:b", "Terminated"),
        ended("s:turn:q", "Running"),
        ended("s:turn:a:run"),  # a child, listed by the same prefix
        ended("s:turn:sealed", "Failed"),  # sealed out of the head: final
        ended("s:turn:young", age_s=1),
        ended("s:turn:me"),
    ]
    chosen = retention.settled_submissions(turns, state, "s:turn:me", NOW - timedelta(seconds=10))
    assert chosen == ["a", "sealed", "c"]  # the oldest first


def test_a_submission_with_a_running_instance_is_left_whole_and_the_turn_goes_last():
    running = [ended("s:turn:a:run"), ended("a:tool:1:0", "Running")]
    assert retention.purge_order("s:turn:a", running) is None

    done = [ended("s:turn:a:run"), ended("s:turn:a:run:round-1"), ended("a:tool:1:0")]
    order = retention.purge_order("s:turn:a", done)
    assert order == ["s:turn:a:run:round-1", "s:turn:a:run", "a:tool:1:0", "s:turn:a"]


# --- end to end -------------------------------------------------------------------------------


@pytest.fixture
def host_with(fresh_kernel_host) -> Callable[..., HostProcess]:
    def factory(value: str, **extra: str) -> HostProcess:
        return fresh_kernel_host({"AGENT_HISTORY_RETENTION": value, **extra})

    return factory


def test_retention_zero_purges_a_submission_once_the_next_one_finished(host_with):
    host = host_with("0").start()
    first = submit(host, "ret0", PLAN, request_id="r1")
    wait_final(host, "ret0", first, timeout=60)
    turn_done(host, "ret0", first)
    before = view(host, "ret0")
    kept = owned(host, "ret0", first)
    assert f"ret0:turn:{first}" in kept and f"ret0:turn:{first}:run" in kept
    assert any(i.startswith(f"{first}:tool:") for i in kept)

    second = submit(host, "ret0", "calculate 4*5", request_id="r2")
    wait_final(host, "ret0", second, timeout=60)
    turn_done(host, "ret0", second)

    assert owned(host, "ret0", first) == []
    assert f"ret0:turn:{second}" in owned(host, "ret0", second)  # its turn: until the next one
    after = view(host, "ret0")
    assert after["entries"][: len(before["entries"])] == before["entries"]
    assert [s["status"] for s in after["submissions"].values()] == ["completed", "completed"]
    assert submission(host, "ret0", first)["answer"] == before["submissions"][first]["answer"]
    changes = host.get("/api/sessions/ret0/changes?after=0").json()
    assert changes["changes"][0]["cursor"] == 1 and changes["cursor"] == after["cursor"]
    retried = host.post("/api/sessions/ret0/submissions", {"requestId": "r1", "text": PLAN})
    assert (retried.status, retried.json()["duplicate"]) == (202, True)
    assert retried.json()["status"] == "completed"


def test_a_long_retention_purges_nothing(host_with):
    host = host_with("1d").start()
    first, second = two_submissions(host, "ret1d")

    assert f"ret1d:turn:{first}" in owned(host, "ret1d", first)
    assert len(owned(host, "ret1d", first)) >= 3  # turn, run, rounds, tool tasks
    assert "retention" not in custom_status(host, f"ret1d:turn:{second}")


def test_a_bad_setting_purges_nothing_and_says_why_on_the_turn(host_with):
    host = host_with("soon").start()
    first, second = two_submissions(host, "retbad")

    assert f"retbad:turn:{first}" in owned(host, "retbad", first)
    custom = custom_status(host, f"retbad:turn:{second}")
    assert custom["phase"] == "done" and custom["status"] == "completed"
    assert "AGENT_HISTORY_RETENTION" in custom["retention"] and "'soon'" in custom["retention"]


def test_a_waiting_submission_is_never_purged(host_with, model):
    """Two submissions wait in the queue while the first one's model call is held: the passes
    of the first two turns run while the third one's turn is alive, and leave it whole."""
    host = host_with("0", AGENT_MODEL_BASE_URL=model.base_url).start()
    held = model.hold()
    first = submit(host, "retq", "calculate 2+3", request_id="r1")
    assert held.arrived.wait(30)
    second = submit(host, "retq", "calculate 3+4", request_id="r2")
    third = submit(host, "retq", "calculate 4+5", request_id="r3")
    try:
        wait_for(lambda: submission(host, "retq", third).get("status") == "queued", 30, "r3 queued")
    finally:
        held.release()
    for sub in (first, second):
        wait_final(host, "retq", sub, timeout=60)
        turn_done(host, "retq", sub)

    assert owned(host, "retq", first) == []  # purged by the second turn's pass
    assert f"retq:turn:{third}" in owned(host, "retq", third)
    assert wait_final(host, "retq", third, timeout=60)["answer"] == "4+5 = 9"
    turn_done(host, "retq", third)
    assert owned(host, "retq", second) == []
    assert [s["status"] for s in view(host, "retq")["submissions"].values()] == ["completed"] * 3


@pytest.mark.crash
def test_a_kill_in_the_middle_of_a_purge_is_finished_after_the_restart(host_with):
    host = host_with("0", KERNEL_FAULTS="retention.after_purge@1").start()
    first = submit(host, "retk", PLAN, request_id="r1")
    wait_final(host, "retk", first, timeout=60)
    turn_done(host, "retk", first)
    assert len(owned(host, "retk", first)) >= 3
    second = submit(host, "retk", "calculate 4*5", request_id="r2")
    # Killed after the first instance of the first submission was purged: its turn, purged
    # last, is still there, so the pass run again after the restart finds the rest.
    assert host.wait_exit(60) != 0, "the fault point was not reached"

    host.env.pop("KERNEL_FAULTS", None)
    host.start()
    wait_final(host, "retk", second, timeout=60)
    turn_done(host, "retk", second)
    wait_for(lambda: owned(host, "retk", first) == [], 30, "the purge to be finished")
    subs = view(host, "retk")["submissions"]
    assert [(s["id"], s["status"]) for s in subs.values()] == [
        (first, "completed"),
        (second, "completed"),
    ]
    assert submission(host, "retk", first)["status"] == "completed"


def test_a_retry_of_a_sealed_and_purged_submission_is_still_a_duplicate(host_with):
    """Sealed out of the head and purged: the API finds the submission in the sealed records,
    so the retry neither starts a turn again nor claims to be new."""
    host = host_with("0", AGENT_SESSION_PAGE_SIZE="4").start()
    subs = []
    for i in range(1, 4):
        subs.append(submit(host, "rets", f"calculate {i}*2", request_id=f"r{i}"))
        wait_final(host, "rets", subs[-1], timeout=60)
        turn_done(host, "rets", subs[-1])
    assert subs[0] not in view(host, "rets")["submissions"]  # sealed
    assert owned(host, "rets", subs[0]) == []  # purged

    retried = host.post("/api/sessions/rets/submissions", {"requestId": "r1", "text": "again"})
    body = retried.json()
    assert (retried.status, body["submissionId"], body["duplicate"]) == (202, subs[0], True)
    assert body["status"] == "completed"
    assert owned(host, "rets", subs[0]) == []  # no turn started again
    assert submission(host, "rets", subs[0])["status"] == "completed"
