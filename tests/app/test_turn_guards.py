"""Each guard of a turn trips and ends it with a clear, recorded reason."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernel.common import ids
from tests.app.turn_support import ModelServer, start_turn_host, submit, view, wait_final
from tests.harness import HostProcess, store_specs


def calculator_call(n: int) -> dict:
    return {
        "id": f"call_many_{n}",
        "type": "function",
        "function": {"name": "calculator", "arguments": json.dumps({"expression": f"{n}+{n}"})},
    }


def script(messages: list[dict]) -> dict | None:
    text = next(m["content"] for m in messages if m["role"] == "user")
    if text == "use many tools":
        return {"tool_calls": [calculator_call(n) for n in range(3)]}
    if text == "calculate 9+9 expensively":
        return {"usage": {"prompt_tokens": 1000}}
    if text == "think slowly":
        return {"delay": 60}  # far past the model timeout; cut short when the server stops
    return None


@pytest.fixture(scope="module")
def model() -> Iterator[ModelServer]:
    server = ModelServer().start()
    server.script = script
    yield server
    server.stop()


@pytest.fixture(scope="module", params=store_specs())
def host(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, model: ModelServer
) -> Iterator[HostProcess]:
    tmp = tmp_path_factory.mktemp("guards")
    fifo = tmp / "blocking-ledger"
    os.mkfifo(fifo)  # appending to it blocks until someone reads: a tool that never finishes
    host = start_turn_host(
        request,
        str(request.param),
        tmp,
        {
            "AGENT_MODEL_BASE_URL": model.base_url,
            "AGENT_TOOL_LEDGER_FILE": str(fifo),
            "AGENT_MAX_ROUNDS": "3",
            "AGENT_MAX_TOOL_CALLS_PER_ROUND": "2",
            "AGENT_TOKEN_BUDGET": "500",
            # One attempt per model call: a timeout any call can hit on a loaded machine
            # would end the other guards' turns with model_timeout instead.
            "AGENT_MODEL_TIMEOUT_S": "5",
            "AGENT_TOOL_TIMEOUT_S": "5",
            "AGENT_MAX_MODEL_ATTEMPTS": "1",
            "AGENT_ATTENTION_TIMEOUT_S": "1",
        },
    )
    host.fifo = fifo  # type: ignore[attr-defined]
    yield host
    host.kill()


def stopped(host: HostProcess, session: str, text: str) -> tuple[dict, dict]:
    sub = submit(host, session, text)
    final = wait_final(host, session, sub)
    return final, view(host, session)["tasks"][ids.turn_instance_id(session, sub)]


def test_max_rounds(host):
    final, turn = stopped(
        host, "rounds", "calculate 1+1 and then calculate 2+2 and then calculate 3+3"
    )

    assert final["status"] == "failed"
    assert turn["reason"].startswith("max_rounds: round 3 of at most 3 asked for tools")


def test_max_tool_calls_per_round(host):
    final, turn = stopped(host, "calls", "use many tools")

    assert final["status"] == "failed"
    assert turn["reason"] == "max_tool_calls: 3 tool calls in one round; the limit is 2"


def test_token_budget(host):
    final, turn = stopped(host, "tokens", "calculate 9+9 expensively")

    assert final["status"] == "failed"
    assert turn["reason"].startswith("token_budget: 100")
    assert turn["reason"].endswith("the budget is 500")


def test_model_timeout(host):
    final, turn = stopped(host, "slow", "think slowly")

    assert final["status"] == "failed"
    assert "model_timeout: no model reply within 5 s" in turn["reason"]


def test_tool_timeout(host):
    final, turn = stopped(host, "hang", "ledger: never written")

    assert final["status"] == "failed"
    assert turn["reason"] == "tool_timeout: append_ledger did not finish within 5 s"
    release(host.fifo)


def release(fifo: Path) -> None:
    """Let the abandoned append finish, so the host's worker thread ends."""
    descriptor = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    os.close(descriptor)
