"""Durable agents with Microsoft Agent Framework (`agent-framework-azurefunctions`): each agent
is a durable entity (`dafx-<name>`) that keeps its conversation and runs the agent - the
model call - inside an entity operation; an orchestration calls the agents one after the
other, so an answer, once the entity has returned it, is a durable fact a crash never repeats.

Two agents: a planner picks a place, a writer turns it into an invitation and signs it with a
function tool (run by the framework inside the writer's entity operation). The framework also
serves each agent over HTTP (`POST /api/agents/<name>/run`), as an MCP tool named after
the agent (the Functions MCP extension's endpoint, `/runtime/webhooks/mcp`), and a health
route (`GET /api/health`). Beside the agents, a framework workflow without a model, `banner` (two
executors, each run as an activity by the `dafx-banner` orchestration; started at
`POST /api/workflow/banner/run`), turns a text into a banner. The model endpoint is any OpenAI-compatible server speaking the chat
completions API, named by `OPENAI_BASE_URL` and `OPENAI_API_KEY` (model: `OPENAI_MODEL`).
`INVITATION_SENDER` signs the invitations; `SIGNED_LOG`, if set, names a file the tool appends
each signed text to (so a test can count the tool's runs).
(docs/host.md: what works on the durable host and what does not.)"""

import os
from collections.abc import Generator
from typing import Any, Never

import azure.durable_functions as df
from agent_framework import Executor, WorkflowBuilder, WorkflowContext, handler, tool
from agent_framework.openai import OpenAIChatCompletionClient
from agent_framework_azurefunctions import AgentFunctionApp


def chat_client() -> OpenAIChatCompletionClient:
    # OPENAI_BASE_URL and OPENAI_API_KEY are read by the client itself.
    return OpenAIChatCompletionClient(model=os.environ.get("OPENAI_MODEL", "gpt-4o-mini"))


planner = chat_client().as_agent(
    name="Planner", instructions="Pick one place to visit. Answer with its name."
)


@tool
def sign(text: str) -> str:
    """Sign an invitation with the sender's name."""
    log = os.environ.get("SIGNED_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as file:
            file.write(text + "\n")
    return f"{text} - {os.environ.get('INVITATION_SENDER', 'Bob')}"


writer = chat_client().as_agent(
    name="Writer",
    instructions="Write a one-line invitation to a friend, signed with the sign tool.",
    tools=[sign],
)


class Shout(Executor):
    @handler
    async def shout(self, text: str, ctx: WorkflowContext[str]) -> None:
        await ctx.send_message(text.upper())


class Frame(Executor):
    @handler
    async def frame(self, text: str, ctx: WorkflowContext[Never, str]) -> None:
        await ctx.yield_output(f"*** {text} ***")


shout, frame = Shout(id="shout"), Frame(id="frame")
banner = WorkflowBuilder(name="banner", start_executor=shout).add_edge(shout, frame).build()

# enable_mcp_tool_trigger: each agent is also an MCP tool (query, sessionId) at /runtime/webhooks/mcp.
app = AgentFunctionApp(agents=[planner, writer], workflow=banner, enable_mcp_tool_trigger=True)


@app.orchestration_trigger(context_name="context")
def trip_invitation(context: df.DurableOrchestrationContext) -> Generator[Any, Any, dict[str, str]]:
    request = context.get_input()
    place = yield app.get_agent(context, "Planner").run(request["question"])
    invitation = yield app.get_agent(context, "Writer").run(
        f"Invite {request['friend']} to {place.text}"
    )
    return {"place": place.text, "invitation": invitation.text}
