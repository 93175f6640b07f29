"""What a tool function is handed and what it returns: the environment of one tool run
(``ToolEnv``) and its ``Outcome``.

Its own module so that the tool families (``activities.tools``, ``activities.workspace_tools``)
share them without importing each other.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import azure.durable_functions as df

Result = dict[str, Any]


@dataclass(slots=True)
class Outcome:
    result: Result
    documents: list[dict[str, Any]] = field(default_factory=list)


ToolFn = Callable[[dict[str, Any], "ToolEnv"], Awaitable[Outcome]]


def no_progress(text: str) -> None:
    return None


@dataclass(frozen=True, slots=True)
class ToolEnv:
    session_id: str
    client: df.DurableOrchestrationClient
    # What a running tool reports; a preview, lossy, never a result (see the module docstring).
    progress: Callable[[str], None] = no_progress
    task_id: str = ""  # the tool task: a workspace snapshot names the task that committed it
