"""``workspace_commit``: commit one workspace snapshot to the session, for an upload.

Input ``{"session_id", "document"}``: ``document`` is the ``workspace`` session document change
(``kernel.workspace.files.document_change``, with its ``expected_version``). Returns the session
entity's commit answer ``{"ok", "result" | "error"}``: a snapshot committed meanwhile by a tool
or another upload refuses it (``version_conflict``), and the API answers 409.

Why an orchestration: the API's durable client can only signal an entity, never learn whether
its commit was refused; an orchestration calls the entity and keeps the answer as its output.
The instance id names the snapshot and the version it was made from, so a retried upload of
the same bytes on the same base finds the first one's answer instead of committing twice.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import azure.durable_functions as df

from orchestrators.steps import session_entity

bp = df.Blueprint()


@bp.orchestration_trigger(context_name="context")
def workspace_commit(context: df.DurableOrchestrationContext) -> Generator[Any, Any, Any]:
    job = context.get_input()
    answer = yield context.call_entity(
        session_entity(job["session_id"]), "commit", {"documents": [job["document"]]}
    )
    return answer
