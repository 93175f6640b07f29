"""Composition root of the durable agent kernel: build the app, register every blueprint."""

import azure.durable_functions as df
import azure.functions as func

from activities import hand_over, model
from api import sessions
from entities import session
from orchestrators import agent_run, agent_turn

app = df.DFApp(http_auth_level=func.AuthLevel.ANONYMOUS)

for blueprint in (
    session.bp,
    agent_turn.bp,
    agent_run.bp,
    model.bp,
    hand_over.bp,
    sessions.bp,
):
    app.register_functions(blueprint)
