"""Test app for timer triggers and the wake-up contract.

``tick`` runs on ``%TICK_SCHEDULE%`` with the monitor on; each run appends one JSON line
(``past_due``, the schedule status) to ``TIMER_APP_MARKS`` and starts the orchestration
``ticked`` with an id derived from the occurrence, through its durable client binding.
``sleeper`` sleeps on a durable timer of ``input["seconds"]`` seconds, then returns ``"woke"``.
"""

import json
import os
from datetime import timedelta

import azure.durable_functions as df
import azure.functions as func

app = df.DFApp(http_auth_level=func.AuthLevel.ANONYMOUS)


@app.timer_trigger(schedule="%TICK_SCHEDULE%", arg_name="timer", use_monitor=True)
@app.durable_client_input(client_name="client")
async def tick(timer: func.TimerRequest, client: df.DurableOrchestrationClient) -> None:
    status = timer.schedule_status
    with open(os.environ["TIMER_APP_MARKS"], "a") as marks:  # noqa: ASYNC230 - one line, a test
        marks.write(json.dumps({"past_due": timer.past_due, "status": status}) + "\n")
    occurrence = (status.get("Last") or "startup").replace(":", "-")
    await client.start_new("ticked", f"tick-{occurrence}", status)


@app.orchestration_trigger(context_name="context")
def ticked(context: df.DurableOrchestrationContext):
    return context.get_input()


@app.orchestration_trigger(context_name="context")
def sleeper(context: df.DurableOrchestrationContext):
    seconds = context.get_input()["seconds"]
    yield context.create_timer(context.current_utc_datetime + timedelta(seconds=seconds))
    return "woke"
