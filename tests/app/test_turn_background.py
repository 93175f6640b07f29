"""Background model calls end to end: a handle in history, durable polls, crashes and cancels.

The model is a local Responses server (``tests/app/responses_server.py``) on loopback; the host
runs the kernel app with ``AGENT_MODEL_BACKGROUND=1`` and a fast poll schedule. Every request,
poll and cancel is counted where the provider would see it.
"""

from __future__ import annotations

import hashlib
import json
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kernel.common import ids
from tests.app.responses_server import ResponsesServer
from tests.app.turn_support import (
    history,
    run_id,
    start_turn_host,
    submit,
    view,
    wait_final,
    wait_phase,
)
from tests.harness import WEBHOOK, HostProcess, store_specs


@pytest.fixture(scope="module")
def server() -> Iterator[ResponsesServer]:
    server = ResponsesServer().start()
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def fresh_script(server: ResponsesServer) -> None:
    server.reset()


def background_env(server: ResponsesServer) -> dict[str, str]:
    return {
        "AGENT_MODEL_BASE_URL": server.base_url,
        "AGENT_MODEL_API_KEY": "test-key",
        "AGENT_MODEL_NAME": "test-model",
        "AGENT_MODEL_BACKGROUND": "1",
        "AGENT_MODEL_POLL_S": "0.1",
        "AGENT_MODEL_MAX_POLL_S": "0.4",
    }


@pytest.fixture(scope="module", params=store_specs())
def host(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    server: ResponsesServer,
) -> Iterator[HostProcess]:
    tmp = tmp_path_factory.mktemp("background")
    host = start_turn_host(request, str(request.param), tmp, background_env(server))
    yield host
    host.kill()


def round_events(host: HostProcess, session: str, sub: str, n: int = 1) -> list[dict]:
    return history(host, f"{run_id(session, sub)}:round-{n}")


def activities(events: list[dict], name: str) -> list[dict]:
    return [
        e for e in events if e.get("EventType") == "TaskCompleted" and e.get("FunctionName") == name
    ]


def test_a_turn_completes_through_background_requests_over_a_lost_connection(host, server):
    server.drop_polls = 2  # the first two polls lose their connection
    first = len(server.submits)
    sub = submit(host, "bg", "calculate 2+3 and then remember plan: buy milk")

    final = wait_final(host, "bg", sub)

    assert final["answer"] == '2+3 = 5\nSaved note "plan".'
    submits = server.submits[first:]
    assert len(submits) == 3  # one request per round, none repeated
    assert all(s["body"]["background"] is True for s in submits)
    assert submits[0]["headers"]["Authorization"] == "Bearer test-key"
    assert [len(s["body"]["input"]) for s in submits] == [1, 3, 5]
    assert submits[1]["body"]["input"][1]["type"] == "function_call"
    assert submits[1]["body"]["input"][2]["type"] == "function_call_output"
    first_id = submits[0]["id"]
    # dropped, dropped, queued, in_progress, completed: every poll asked about the same handle
    assert server.polls.count(first_id) == 5
    events = round_events(host, "bg", sub)
    assert len(activities(events, "submit_model_request")) == 1
    assert len(activities(events, "poll_model_request")) == 5
    assert len([e for e in events if e.get("EventType") == "TimerFired"]) == 5
    assistant = [e for e in view(host, "bg")["entries"] if e["role"] == "assistant"]
    assert [e["data"]["model"] for e in assistant] == ["test-model"] * 3
    assert all(e["data"]["usage"]["prompt_tokens"] > 0 for e in assistant)


def test_a_turn_cancelled_while_waiting_cancels_the_remote_request(host, server):
    held = server.hold()
    first, cancels = len(server.submits), len(server.cancels)
    sub = submit(host, "bgc", "what is 6*7")
    assert held.polled.wait(60)
    handle = server.submits[first]["id"]

    signalled = host.post(
        f"{WEBHOOK}/entities/session/bgc?op=cancel",
        {"submission_id": sub, "reason": "the user left"},
    )
    assert signalled.status == 202, signalled.body
    final = wait_final(host, "bgc", sub)

    assert final["status"] == "cancelled"
    assert server.cancels[cancels:] == [handle]
    assert len(server.submits) == first + 1
    turn = view(host, "bgc")["tasks"][ids.turn_instance_id("bgc", sub)]
    assert "cancelled: the user left" in turn["reason"]
    held.release()


def test_the_rounds_cancel_event_stops_the_wait_at_once(host, server):
    held = server.hold()
    first, cancels = len(server.submits), len(server.cancels)
    sub = submit(host, "bge", "what is 7*7")
    assert held.polled.wait(60)
    round_id = f"{run_id('bge', sub)}:round-1"
    event = urllib.parse.quote(f"cancel:{round_id}")

    raised = host.post(
        f"{WEBHOOK}/instances/{urllib.parse.quote(round_id)}/raiseEvent/{event}",
        {"reason": "operator stop"},
    )
    assert raised.status == 202, raised.body
    final = wait_final(host, "bge", sub)

    assert final["status"] == "cancelled"
    assert server.cancels[cancels:] == [server.submits[first]["id"]]
    turn = view(host, "bge")["tasks"][ids.turn_instance_id("bge", sub)]
    assert "cancelled: operator stop" in turn["reason"]
    held.release()


def test_an_unknown_handle_fails_the_call_with_the_providers_answer(host, server):
    held = server.hold()
    first = len(server.submits)
    sub = submit(host, "bgu", "hello there")
    assert held.polled.wait(60)
    handle = server.submits[first]["id"]
    server.forget()  # the provider no longer knows the request
    held.release()

    parked = wait_phase(host, run_id("bgu", sub), "needs_attention")

    assert parked["reason"].startswith("model_fatal: model endpoint answered 404")
    assert f"Response with id '{handle}' not found" in parked["reason"]
    assert len(server.submits) == first + 1  # never silently asked again
    host.post(
        f"/api/sessions/bgu/submissions/{sub}/operator", {"requestId": "o1", "action": "abort"}
    )
    assert wait_final(host, "bgu", sub)["status"] == "failed"


# --- crashes ---------------------------------------------------------------------------------


def ledger_container(tmp_path: Path) -> str:
    return "ledger-" + hashlib.sha256(str(tmp_path).encode()).hexdigest()[:16]


@pytest.fixture
def crashing(
    fresh_kernel_host, server: ResponsesServer, tmp_path: Path
) -> Callable[[], HostProcess]:
    def factory() -> HostProcess:
        return fresh_kernel_host(
            {
                **background_env(server),
                "AGENT_LEDGER_DIR": str(tmp_path / "ledger"),
                "AGENT_LEDGER_CONTAINER": ledger_container(tmp_path),  # used on Azure only
            }
        )

    return factory


@pytest.mark.crash
def test_a_host_killed_while_polling_resumes_the_same_handle(crashing, server):
    host = crashing().start()
    held = server.hold()
    first, cancels = len(server.submits), len(server.cancels)
    sub = submit(host, "bgk", "hello there")
    assert held.polled.wait(60)
    handle = server.submits[first]["id"]

    for _ in range(2):  # killed twice while the turn waits for the model
        host.kill()
        held.polled.clear()
        polls_before = len(server.polls)
        host.start()
        assert held.polled.wait(60)  # the restarted host polls again ...
        assert server.polls[polls_before:] and set(server.polls[polls_before:]) == {handle}
    held.release()
    final = wait_final(host, "bgk", sub)

    assert final["answer"] is not None and "hello there" in final["answer"]
    assert len(server.submits) == first + 1  # exactly one request across both kills
    assert server.cancels[cancels:] == []


@pytest.mark.crash
def test_a_host_killed_after_submitting_reuses_the_saved_handle(crashing, server):
    host = crashing()
    first = len(server.submits)
    # Activities run turn_limits (1), then submit_model_request (2): die after it answered,
    # before its completion is saved in history.
    host.start(faults="activity.before_complete@2")
    sub = submit(host, "bgs", "hello there")
    assert host.wait_exit(60) != 0, "the fault point was not reached"
    assert len(server.submits) == first + 1
    host.start()

    final = wait_final(host, "bgs", sub)

    assert final["status"] == "completed"
    assert len(server.submits) == first + 1  # the handle came from the ledger
    shown = host.status(f"{run_id('bgs', sub)}:round-1", "?showHistory=true&showHistoryOutput=true")
    (submitted,) = activities((shown or {}).get("historyEvents") or [], "submit_model_request")
    result = submitted["Result"]
    assert json.loads(result)["reused"] if isinstance(result, str) else result["reused"]


# --- other settings ----------------------------------------------------------------------------


def test_the_offline_planner_answers_background_calls_with_no_endpoint(fresh_kernel_host):
    host = fresh_kernel_host({"AGENT_MODEL_BACKGROUND": "1", "AGENT_MODEL_POLL_S": "0.1"}).start()
    sub = submit(host, "bgo", "calculate 2+3")

    final = wait_final(host, "bgo", sub)

    assert final["answer"] == "2+3 = 5"
    events = round_events(host, "bgo", sub)
    assert len(activities(events, "submit_model_request")) == 1
    assert len(activities(events, "poll_model_request")) == 1
    assert not activities(events, "call_model")


def test_a_request_past_its_deadline_is_cancelled_and_the_call_times_out(fresh_kernel_host, server):
    host = fresh_kernel_host(
        {
            **background_env(server),
            "AGENT_MODEL_BACKGROUND_TIMEOUT_S": "1",
            "AGENT_MAX_MODEL_ATTEMPTS": "1",
        }
    ).start()
    held = server.hold()  # never answers within the deadline
    first, cancels = len(server.submits), len(server.cancels)
    sub = submit(host, "bgt", "hello there")

    parked = wait_phase(host, run_id("bgt", sub), "needs_attention")

    handle = server.submits[first]["id"]
    assert parked["reason"] == (
        f"model_timeout: the background model request {handle} did not finish within 1 s"
    )
    assert server.cancels[cancels:] == [handle]
    assert len(server.submits) == first + 1
    held.release()
