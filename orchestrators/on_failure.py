"""``notify_operator``: the kernel's ``onFailure`` handler for task kinds that gave up.

Started by ``orchestrators/failures.run_kind`` once per task, as ``{task_id}:on-failure``,
with ``{"kind", "task_id", "input", "failure", "attempts"}``: the original input and the last
failure. It mails the operator (``activities/operator_notice.py``) once - no retry of its own,
since a handler that cannot reach anybody is exactly the case for ``needs_attention`` - and
returns the notice's result; it fails when nobody could be told.

The tool catalogue (``kernel/turn/tools.py``, ``ToolSpec.failure``) and agent loops name it.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import azure.durable_functions as df

from orchestrators.steps import set_status

bp = df.Blueprint()
HANDLER = "notify_operator"


@bp.orchestration_trigger(context_name="context")
def notify_operator(context: df.DurableOrchestrationContext) -> Generator[Any, Any, Any]:
    job: dict[str, Any] = context.get_input()
    set_status(context, "notify", kind=job.get("kind"), task=job.get("task_id"))
    notice = yield context.call_activity("operator_notice", job)
    set_status(context, "notified", kind=job.get("kind"), task=job.get("task_id"))
    return notice
