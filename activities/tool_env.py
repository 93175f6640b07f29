"""What a tool function is handed and what it returns: the environment of one tool run
(``ToolEnv``) and its ``Outcome``; ``stored_if_large(result)``, the content reference of a
result above ``INLINE_RESULT_BYTES`` (None below); ``tool_progress(job)``, the live preview
writer of a tool task (None when previews are off).

Its own module so that the tool families (``activities.tools``, ``activities.workspace_tools``)
share them without importing each other.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import azure.durable_functions as df

from adapters import previews as preview_store
from adapters.content_store import default_store
from kernel.session import previews as preview_rules

Result = dict[str, Any]
INLINE_RESULT_BYTES = 12 * 1024


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


def stored_if_large(result: Result) -> str | None:
    text = json.dumps(result, sort_keys=True, ensure_ascii=False)
    return default_store().put(text) if len(text.encode()) > INLINE_RESULT_BYTES else None


def tool_progress(job: dict[str, Any]) -> preview_store.PreviewWriter | None:
    """The progress writer of this tool task (None when previews are off), already showing
    that the tool runs."""
    settings = preview_store.settings()
    task = str(job.get("tool_task_id") or "")
    submission_id = preview_rules.tool_preview_submission(task)
    if not settings.enabled or submission_id is None:
        return None
    store = preview_store.open_store()
    if store is None:
        return None
    writer = preview_store.PreviewWriter(
        store,
        session_id=job["session_id"],
        task=task,
        kind=preview_rules.TOOL_PROGRESS,
        submission_id=submission_id,
        interval_s=settings.interval_s,
    )
    writer.update(f"running {job['name']}")
    return writer
