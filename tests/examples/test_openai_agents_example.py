"""examples/openai_agents end to end on the host: the Durable Functions SDK's OpenAI Agents
integration against a local OpenAI-compatible server, a crash during a model call included.

The host runs in the example's own environment, ``.venv-openai-agents``, made by
``scripts/setup-example`` from PyPI (pinned; a no-op once done): where ``openai-agents`` is
installed, every import of ``azure.durable_functions`` imports it, seconds of CPU in every
other test's host processes. Skipped only when PyPI cannot be reached to make it.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from tests.examples.support import LoopbackServer, example_python
from tests.harness import ROOT

APP = ROOT / "examples" / "openai_agents"
REQUEST = {"question": "Where should we go this weekend?", "friend": "Ann"}
ANSWER = {
    "place": "Pick Where should we go this weekend?",
    "invitation": "Write Invite Ann to Pick Where should we go this weekend?",
}


class ModelServer(LoopbackServer):
    """An OpenAI Responses API answering "<first word of the instructions> <last input>".
    ``hold_from(n)``: request n and later ones wait until ``release`` is set (the test kills
    the host meanwhile); chosen before the run starts, so no request slips past it."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[list[dict[str, Any]]] = []
        self.held_from = 0

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/responses", self._responses)

    def hold_from(self, number: int) -> None:
        self.held_from = number
        self.release.clear()

    async def _responses(self, request: web.Request) -> web.Response:
        body = await request.json()
        items = (
            body["input"]
            if isinstance(body["input"], list)
            else [{"role": "user", "content": body["input"]}]
        )
        self.requests.append(body)
        n = len(self.requests)
        if self.held_from and n >= self.held_from:
            await asyncio.to_thread(self.release.wait, 60)
        who = str(body.get("instructions") or "").split(" ")[0]
        text = f"{who} {items[-1]['content']}"
        output = {
            "type": "message",
            "id": f"msg_{n}",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }
        return web.json_response(
            {
                "id": f"resp_{n}",
                "object": "response",
                "created_at": 0,
                "status": "completed",
                "model": body.get("model") or "test-model",
                "output": [output],
                "parallel_tool_calls": True,
                "tool_choice": "auto",
                "tools": [],
                "usage": {
                    "input_tokens": 10,
                    "output_tokens": 5,
                    "total_tokens": 15,
                    "input_tokens_details": {"cached_tokens": 0},
                    "output_tokens_details": {"reasoning_tokens": 0},
                },
            }
        )


@pytest.fixture(scope="module")
def example() -> Path:
    """The example's environment, .venv-openai-agents (scripts/setup-example)."""
    return example_python("openai_agents", "openai-agents", "openai-agents")


@pytest.fixture
def model() -> Iterator[ModelServer]:
    server = ModelServer().start()
    yield server
    server.stop()


def settings(model: ModelServer) -> dict[str, str]:
    return {
        "OPENAI_BASE_URL": model.base_url,
        "OPENAI_API_KEY": "test-key",
        "OPENAI_AGENTS_DISABLE_TRACING": "1",
    }


def test_two_agents_answer_through_model_call_activities(
    durable_host_factory, model: ModelServer, example: Path
) -> None:
    host = durable_host_factory(APP, env=settings(model), python=example, timeout=120)

    run = host.start_new("trip_invitation", REQUEST)
    final = host.wait_for_completion(run, timeout=60)

    assert json.loads(final["output"]) == ANSWER  # the integration returns JSON text
    history = host.status(run, history=True)["historyEvents"]
    done = [e["FunctionName"] for e in history if e["EventType"] == "TaskCompleted"]
    assert done == ["run_model", "run_model"]
    assert len(model.requests) == 2


def test_a_crash_during_a_model_call_gives_the_same_answer(
    durable_host_factory, model: ModelServer, example: Path
) -> None:
    host = durable_host_factory(APP, env=settings(model), python=example, timeout=120)
    # The planner's call is answered; the writer's is held. Held by number, set before the
    # run: holding once the first call was seen could come after the second had passed.
    model.hold_from(2)
    run = host.start_new("trip_invitation", REQUEST)
    wait_for_requests(model, 2)

    host.kill()  # SIGKILL while the model server holds the writer's request
    model.release.set()
    host.restart()
    final = host.wait_for_completion(run, timeout=60)

    assert json.loads(final["output"]) == ANSWER  # the integration returns JSON text
    history = host.status(run, history=True)["historyEvents"]
    done = [e["FunctionName"] for e in history if e["EventType"] == "TaskCompleted"]
    assert done == ["run_model", "run_model"]
    # The planner's answer was durable: only the interrupted call was made again.
    assert [r["instructions"].split(" ")[0] for r in model.requests] == ["Pick", "Write", "Write"]


def wait_for_requests(model: ModelServer, count: int) -> None:
    deadline = time.monotonic() + 60
    while len(model.requests) < count:
        assert time.monotonic() < deadline, f"the model server never got request {count}"
        time.sleep(0.05)
