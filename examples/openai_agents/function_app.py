"""Durable agents with the OpenAI Agents SDK through the Durable Functions SDK's own
integration (`azure.durable_functions.openai_agents`): every model call of an agent runs as an
activity, so a model answer, once recorded, is a durable fact that a crash never repeats.

Two agents in a row: a planner picks a place, a writer turns it into an invitation. The model
endpoint is any OpenAI-compatible server speaking the Responses API (the Agents SDK's
default), named by `OPENAI_BASE_URL` and `OPENAI_API_KEY`. No traces are sent anywhere.
(docs/host.md: what works with these package versions, and the gap with function tools.)"""

import azure.durable_functions as df
import azure.functions as func
from agents import Agent, Runner, set_tracing_disabled

set_tracing_disabled(True)

app = df.DFApp(http_auth_level=func.AuthLevel.ANONYMOUS)


@app.orchestration_trigger(context_name="context")
@app.durable_openai_agent_orchestrator
def trip_invitation(context):
    # An object as input: the SDK reads a plain-string orchestration input as JSON text.
    request = context.get_input()
    planner = Agent(name="Planner", instructions="Pick one place to visit. Answer with its name.")
    place = Runner.run_sync(planner, request["question"]).final_output
    writer = Agent(name="Writer", instructions="Write a one-line invitation to a friend.")
    invitation = Runner.run_sync(writer, f"Invite {request['friend']} to {place}").final_output
    return {"place": place, "invitation": invitation}
