"""``loop_submit``: submit one occurrence of an agent loop as an ordinary submission.

The request id is ``loop:{loop}:{occurrence}`` (decided by the loop, ``kernel/loops/loop.py``), and
a submission is idempotent by its request id (``api/sessions.start_once``), so a retried
activity or an occurrence submitted twice finds the first submission and starts nothing.
A refused submission (the session's queue is full) is answered, not raised: the loop records
it and goes on to the next occurrence. Anything else that goes wrong raises, and the loop's
failure policy tries again (``orchestrators/agent_loop.SUBMIT``). The loop's declared
``tools`` and ``policy`` travel with the submission (``kernel.loops.loop.run_options``), so its
run calls only those tools under that policy.
"""

from __future__ import annotations

from typing import Any

import azure.durable_functions as df

from activities.tools import raise_point
from api import inputs
from api.sessions import start_once
from kernel.common.errors import KernelError

bp = df.Blueprint()


@bp.activity_trigger(input_name="job")
@bp.durable_client_input(client_name="client")
async def loop_submit(job: dict[str, Any], client: df.DurableOrchestrationClient) -> dict[str, Any]:
    raise_point("loop.submit")  # KERNEL_FAULTS="loop.submit@n": the first n runs raise (tests)
    options = {key: job[key] for key in ("tools", "policy") if job.get(key)}
    submission = inputs.Submission(job["request_id"], job["prompt"], options)
    try:
        sub_id, status, duplicate = await start_once(client, job["session_id"], submission)
    except KernelError as exc:
        return {"ok": False, "request_id": job["request_id"], "error": exc.to_dict()}
    return {
        "ok": True,
        "request_id": job["request_id"],
        "submission_id": sub_id,
        "status": status,
        "duplicate": duplicate,
    }
