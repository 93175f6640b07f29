"""examples/agent_framework end to end on the host: Microsoft Agent Framework's durable agents
for Azure Functions (``agent-framework-azurefunctions``) against a local OpenAI-compatible
server (chat completions, streamed, as the agents' entities ask for it), a crash during a model
call included.

The framework's pins conflict with the project's, so the host runs in the example's own
environment, ``.venv-agentfw``, made by ``scripts/setup-example`` from PyPI (pinned; the test
runs it, a no-op once done). Skipped only when PyPI cannot be reached to make it.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from durable_host.pytest_plugin import DurableHost
from tests.examples.support import LoopbackServer, example_python
from tests.harness import ROOT

APP = ROOT / "examples" / "agent_framework"
REQUEST = {"question": "Where should we go this weekend?", "friend": "Ann"}
ANSWER = {
    "place": "Pick Where should we go this weekend?",
    "invitation": "Write Invite Ann to Pick Where should we go this weekend? - Bob",
}


@pytest.fixture(scope="module")
def agentfw_python() -> Path:
    """The example's environment, .venv-agentfw (scripts/setup-example)."""
    return example_python("agent_framework", "agentfw", "agent-framework-azurefunctions")


class ModelServer(LoopbackServer):
    """An OpenAI chat completions API, streamed. Offered tools and no tool result yet, it calls
    the first tool with ``{"text": <last message>}``; otherwise it answers "<first word of the
    system message> <last message>". ``hold_from(n)``: request n and later ones wait until
    ``release`` is set (the test kills the host meanwhile)."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[dict[str, Any]] = []
        self.held_from = 0

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/chat/completions", self._chat)

    def hold_from(self, number: int) -> None:
        self.held_from = number
        self.release.clear()

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        n = len(self.requests)
        if self.held_from and n >= self.held_from:
            await asyncio.to_thread(self.release.wait, 60)
        messages = body["messages"]
        chunk = {"id": f"chatcmpl-{n}", "object": "chat.completion.chunk", "created": 0}
        chunk["model"] = body.get("model") or "test-model"
        if body.get("tools") and messages[-1]["role"] != "tool":
            call = {
                "index": 0,
                "id": f"call_{n}",
                "type": "function",
                "function": {
                    "name": body["tools"][0]["function"]["name"],
                    "arguments": json.dumps({"text": text(messages[-1])}),
                },
            }
            delta: dict[str, Any] = {"role": "assistant", "tool_calls": [call]}
            finish = "tool_calls"
        else:
            system = next((text(m) for m in messages if m["role"] == "system"), "")
            delta = {"role": "assistant", "content": f"{system.split(' ')[0]} {text(messages[-1])}"}
            finish = "stop"
        events = [
            {**chunk, "choices": [{"index": 0, "delta": delta}]},
            {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]},
            {
                **chunk,
                "choices": [],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
            },
        ]
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for event in events:
            await response.write(f"data: {json.dumps(event)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    def instructions(self) -> list[str]:
        """The first word of each request's system message: which agent asked."""
        return [
            next(text(m) for m in r["messages"] if m["role"] == "system").split(" ")[0]
            for r in self.requests
        ]


def text(message: dict[str, Any]) -> str:
    content = message.get("content") or ""
    if isinstance(content, list):
        return " ".join(part.get("text", "") for part in content)
    return str(content)


@pytest.fixture
def model() -> Iterator[ModelServer]:
    server = ModelServer().start()
    yield server
    server.stop()


@pytest.fixture
def host(
    durable_host_factory: Callable[..., DurableHost],
    agentfw_python: Path,
    model: ModelServer,
    tmp_path: Path,
) -> DurableHost:
    """The example on a host running in .venv-agentfw, a fresh SQLite store in tmp_path."""
    env = {
        "OPENAI_BASE_URL": model.base_url,
        "OPENAI_API_KEY": "test-key",
        "OPENAI_MODEL": "test-model",
        "SIGNED_LOG": str(tmp_path / "signed.txt"),
    }
    # Importing the framework takes seconds.
    return durable_host_factory(APP, env=env, python=agentfw_python, timeout=120)


def agent_calls(history: list[dict[str, Any]]) -> list[str]:
    """The entities the orchestration called, as ``@<entity>@<key>``, in order."""
    return [e["InstanceId"] for e in history if e["EventType"] == "EventSent"]


def test_two_durable_agents_answer_in_an_orchestration(
    host: DurableHost, model: ModelServer, tmp_path: Path
) -> None:
    run = host.start_new("trip_invitation", REQUEST)
    final = host.wait_for_completion(run, timeout=60)

    assert final["output"] == ANSWER
    history = host.status(run, history=True)["historyEvents"]  # type: ignore[index]
    calls = agent_calls(history)
    assert [call.split("@")[1] for call in calls] == ["dafx-planner", "dafx-writer"]
    # The writer's model asked for its tool, the framework ran it and gave the model its result.
    assert model.instructions() == ["Pick", "Write", "Write"]
    assert model.requests[2]["messages"][-1]["role"] == "tool"
    assert signed(tmp_path) == ["Invite Ann to Pick Where should we go this weekend?"]
    # Each agent's entity keeps the conversation of its session.
    _, name, key = calls[0].split("@")
    state = json.dumps(host.entity_state(name, key))
    assert "Where should we go this weekend?" in state
    assert ANSWER["place"] in state


def test_a_crash_during_a_model_call_gives_the_same_answer(
    host: DurableHost, model: ModelServer, tmp_path: Path
) -> None:
    # The planner's call and the writer's first (the tool call) are answered; the writer's
    # second call, after its tool ran, waits.
    model.hold_from(3)
    run = host.start_new("trip_invitation", REQUEST)
    wait_for_requests(model, 3)

    host.kill()  # SIGKILL while the writer's entity waits for the model
    model.release.set()
    host.restart(timeout=120)
    final = host.wait_for_completion(run, timeout=60)

    assert final["output"] == ANSWER
    # The planner's answer was durable: it was not asked again. The writer's entity operation
    # was never committed, so it ran again from its start - its tool too (at least once, as
    # an activity would).
    assert model.instructions() == ["Pick", "Write", "Write", "Write", "Write"]
    assert signed(tmp_path) == ["Invite Ann to Pick Where should we go this weekend?"] * 2
    history = host.status(run, history=True)["historyEvents"]  # type: ignore[index]
    assert [call.split("@")[1] for call in agent_calls(history)] == [
        "dafx-planner",
        "dafx-writer",
    ]


def test_the_agent_http_route_answers_and_keeps_the_session(
    host: DurableHost, model: ModelServer
) -> None:
    first = host.post("/api/agents/Planner/run", {"message": "Where to?", "session_id": "s1"})
    assert first.status == 200, first.body
    assert first.json()["response"] == "Pick Where to?"
    again = host.post("/api/agents/Planner/run", {"message": "And then?", "session_id": "s1"})
    assert again.status == 200, again.body
    assert again.json()["response"] == "Pick And then?"

    # The second call carried the first exchange: the entity kept the conversation.
    assert [[m["role"] for m in r["messages"]] for r in model.requests] == [
        ["system", "user"],
        ["system", "user", "assistant", "user"],
    ]
    empty = host.post("/api/agents/Planner/run", {"session_id": "s1"})
    assert empty.status == 400
    assert empty.json() == {"error": "Message is required"}
    health = host.get("/api/health")
    assert health.status == 200 and health.json()["agent_count"] == 2


def test_a_workflow_runs_as_an_orchestration_of_activities(host: DurableHost) -> None:
    started = host.post("/api/workflow/banner/run?waitForResponse=true", "see you there")
    assert started.status == 200, started.body
    assert started.json()["output"] == ["*** SEE YOU THERE ***"]

    run = started.json()["instanceId"]
    status = host.get(f"/api/workflow/banner/status/{run}")
    assert status.status == 200, status.body
    assert status.json()["runtimeStatus"] == "Completed"
    history = host.status(run, history=True)["historyEvents"]  # type: ignore[index]
    done = [e["FunctionName"] for e in history if e["EventType"] == "TaskCompleted"]
    assert done == ["dafx-banner-shout", "dafx-banner-frame"]
    assert host.get("/api/workflow/banner/status/no-such-run").status == 404


def test_each_agent_is_an_mcp_tool(host: DurableHost, model: ModelServer) -> None:
    """``enable_mcp_tool_trigger=True``: the official MCP client lists the agents as tools and
    calls one; a second call in the same session carries the conversation."""
    from tests.host.mcp_client import connect

    async def go() -> None:
        async with connect(host.base_url) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert set(tools) == {"Planner", "Writer"}
            assert tools["Planner"].input_schema["required"] == ["query"]
            first = await client.call_tool("Planner", {"query": "Where to?", "sessionId": "m1"})
            assert not first.is_error, first
            assert first.content[0].text == "Pick Where to?"
            again = await client.call_tool("Planner", {"query": "Then?", "sessionId": "m1"})
            assert again.content[0].text == "Pick Then?"

    asyncio.run(go())
    assert [[m["role"] for m in r["messages"]] for r in model.requests] == [
        ["system", "user"],
        ["system", "user", "assistant", "user"],
    ]


def signed(tmp_path: Path) -> list[str]:
    """What the writer's tool signed, one line a run."""
    return (tmp_path / "signed.txt").read_text().splitlines()


def wait_for_requests(model: ModelServer, count: int) -> None:
    deadline = time.monotonic() + 60
    while len(model.requests) < count:
        assert time.monotonic() < deadline, f"the model server never got request {count}"
        time.sleep(0.05)
