"""The OpenAI-compatible path, against a local chat-completions server started by the test."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

import pytest

from kernel.common import ids
from tests.app.turn_support import (
    ModelServer,
    history,
    start_turn_host,
    submit,
    view,
    wait_final,
    wait_phase,
)
from tests.harness import HostProcess, store_specs


@pytest.fixture(scope="module")
def model() -> Iterator[ModelServer]:
    server = ModelServer().start()
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def fresh_script(model: ModelServer) -> None:
    model.script = None


@pytest.fixture(scope="module", params=store_specs())
def host(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, model: ModelServer
) -> Iterator[HostProcess]:
    host = start_turn_host(
        request,
        str(request.param),
        tmp_path_factory.mktemp("openai"),
        {
            "AGENT_MODEL_BASE_URL": model.base_url,
            "AGENT_MODEL_API_KEY": "test-key",
            "AGENT_MODEL_NAME": "test-model",
            "AGENT_MAX_CONCURRENT_MODEL_CALLS": "1",
        },
    )
    yield host
    host.kill()


def parse(timestamp: str) -> datetime:
    return datetime.fromisoformat(timestamp)


def at(event: dict) -> datetime:
    return parse(event["Timestamp"])


def test_a_turn_through_the_openai_path_uses_real_tool_calls_and_records_usage(host, model):
    model.script = lambda messages: {"usage": {"prompt_tokens": 100, "completion_tokens": 7}}
    sub = submit(host, "openai", "calculate 2+3 and then remember plan: buy milk")

    final = wait_final(host, "openai", sub)

    assert final["answer"] == '2+3 = 5\nSaved note "plan".'
    _first, _second, third = (r["messages"] for r in model.requests[-3:])
    assert [m["role"] for m in third] == ["user", "assistant", "tool", "assistant", "tool"]
    assert third[1]["tool_calls"][0]["function"]["name"] == "calculator"
    assert model.requests[-1]["headers"]["Authorization"] == "Bearer test-key"
    assistant = [e for e in view(host, "openai")["entries"] if e["role"] == "assistant"]
    assert [e["data"]["usage"] for e in assistant] == [
        {"prompt_tokens": 100, "completion_tokens": 7}
    ] * 3
    assert all(e["data"]["model"] == "test-model" for e in assistant)


def test_a_429_waits_at_least_the_retry_after_then_retries(host, model):
    refused = []

    def once_429(messages):
        if not refused:
            refused.append(True)
            return {"status": 429, "headers": {"Retry-After": "1"}}
        return None

    model.script = once_429
    sub = submit(host, "rate", "what is 2+2")

    final = wait_final(host, "rate", sub)

    assert final["status"] == "completed"
    events = history(host, f"{ids.turn_instance_id('rate', sub)}:run:round-1")
    calls = [
        e
        for e in events
        if e.get("EventType") == "TaskCompleted" and e.get("FunctionName") == "call_model"
    ]
    fired = next(e for e in events if e.get("EventType") == "TimerFired")
    assert len(calls) == 2
    refused_at, retried_at = at(calls[0]), parse(calls[1]["ScheduledTime"])
    assert (retried_at - refused_at).total_seconds() >= 1.0
    assert (parse(fired["FireAt"]) - refused_at).total_seconds() >= 1.0


def test_model_calls_queue_for_the_concurrency_slot_across_sessions(host, model):
    held = model.hold()
    first = submit(host, "slot-a", "what is 3+3")
    assert held.arrived.wait(60)
    second = submit(host, "slot-b", "what is 4+4")

    waiting = wait_phase(host, f"{ids.turn_instance_id('slot-b', second)}:run:round-1", "waiting")
    calls_while_waiting = len(model.requests)
    held.release()

    assert waiting["slot_position"] == 1
    assert wait_final(host, "slot-a", first)["answer"] == "3+3 = 6"
    assert wait_final(host, "slot-b", second)["answer"] == "4+4 = 8"
    assert calls_while_waiting == len(model.requests) - 3  # b asked only after a's slot freed


def test_a_fatal_model_error_parks_the_turn_with_the_facts(host, model):
    model.script = lambda messages: {"status": 400}
    sub = submit(host, "fatal", "hello")

    parked = wait_phase(host, f"{ids.turn_instance_id('fatal', sub)}:run", "needs_attention")

    assert parked["reason"].startswith("model_fatal: model endpoint answered 400")
    turn = view(host, "fatal")["tasks"][ids.turn_instance_id("fatal", sub)]
    assert (turn["status"], turn["reason"]) == ("needs_attention", parked["reason"])
    model.script = None
    host.post(
        f"/api/sessions/fatal/submissions/{sub}/operator", {"requestId": "o1", "action": "abort"}
    )
    assert wait_final(host, "fatal", sub)["status"] == "failed"
