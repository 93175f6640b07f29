"""The ``limiter`` entity: per-key concurrency control (``kernel/common/limits.py``).

One entity per filled key (``service:mail``, ``ledger:s1``); every operation is the pure
reducer ``kernel.common.limits.apply``, the state set once from its result. Time comes from the
caller's ``now`` (its ``current_utc_datetime``), never from a clock here, as for the
``semaphore`` entity, whose ``caller_time`` this shares. The ``semaphore`` entity of the model
slots stays as it is: the golden histories of every turn pin its name and operations.
"""

from __future__ import annotations

import azure.durable_functions as df

from entities.semaphore import caller_time
from kernel.common import limits

bp = df.Blueprint()


@bp.entity_trigger(context_name="context", entity_name="limiter")
def limiter(context: df.DurableEntityContext) -> None:
    state = context.get_state(lambda: None) or limits.new_state()
    request = context.get_input() or {}
    now = caller_time(state, request)
    new, result = limits.apply(state, context.operation_name, request, now)
    if new is not state:
        context.set_state({**new, "clock": now})
    context.set_result(result)
