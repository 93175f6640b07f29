"""Composition root of the durable agent kernel: build the app, register every blueprint."""

import azure.durable_functions as df
import azure.functions as func

from activities import (
    approvals,
    cancel,
    environment,
    hand_over,
    loop_submit,
    mail,
    mcp,
    model,
    model_background,
    notice_session,
    operator_notice,
    retention,
    skills,
    tools,
    workspace_collect,
)
from api import approval_links, loops, mcp_tools, operator, pages, sessions, workspace
from api import skills as skill_routes
from entities import limiter, loop_control, semaphore, session
from orchestrators import (
    agent_loop,
    agent_round,
    agent_run,
    agent_turn,
    mcp_task,
    notices,
    on_failure,
    skill_run,
    tool_task,
    workspace_commit,
)

# Every route declares its level; the default covers any route added without one.
app = df.DFApp(http_auth_level=func.AuthLevel.FUNCTION)

for blueprint in (
    session.bp,
    agent_turn.bp,
    agent_run.bp,
    agent_round.bp,
    model.bp,
    # Background model calls (docs/turn.md).
    model_background.bp,
    hand_over.bp,
    sessions.bp,
    pages.bp,
    semaphore.bp,
    tool_task.bp,
    tools.bp,
    operator.bp,
    notices.bp,
    mail.bp,
    notice_session.bp,
    cancel.bp,
    approvals.bp,
    approval_links.bp,
    # Agent loops (docs/loops.md).
    agent_loop.bp,
    loop_submit.bp,
    loops.bp,
    loop_control.bp,
    # Declared per-key limits of tools (docs/loops.md).
    limiter.bp,
    # The onFailure handler of tools and loops that gave up (docs/loops.md).
    on_failure.bp,
    operator_notice.bp,
    # Skills as data (docs/skills.md).
    skill_run.bp,
    skills.bp,
    skill_routes.bp,
    # History retention of settled submissions (docs/kernel-session.md).
    retention.bp,
    # The workspace content collector, on AGENT_WORKSPACE_COLLECT_SCHEDULE (docs/workspace.md).
    workspace_collect.bp,
    # The session workspace: uploads commit a snapshot (docs/workspace.md).
    workspace_commit.bp,
    workspace.bp,
    # The environment a turn runs in, checked when it goes on (docs/workspace.md).
    environment.bp,
    # MCP servers' tools as durable tool tasks (docs/tools.md).
    mcp.bp,
    mcp_task.bp,
    # The kernel as an MCP server: submit, read, approve (docs/mcp-kernel.md).
    mcp_tools.bp,
):
    app.register_functions(blueprint)
