"""The ``loop_control`` entity: the control requests of one loop incarnation, held until the
loop takes them (``docs/loops.md``, "A control request is never lost").

Key ``{session}:{loop}:{incarnation}`` (``kernel.loops.loop.control_entity_key``). Operations:

* ``request`` ``{"action", "id"}`` (signalled by the loops API): add the request unless its id
  is known already; the entity applies each operation once, so an accepted request is held
  exactly once, whatever happens to the loop's executions meanwhile.
* ``take`` (called by the loop at the start of every execution): the pending requests in the
  order they were accepted, cleared from the state.
* ``forget`` (signalled by a loop that was deleted): the entity's state is removed.

Every operation is a reducer of ``kernel/loops/loop.py``; the state is set once from its result.
An entity that never held a request is never written (``take`` on nothing stores nothing).
"""

from __future__ import annotations

import azure.durable_functions as df

from kernel.common.errors import ValidationError
from kernel.loops import loop as loops

bp = df.Blueprint()


@bp.entity_trigger(context_name="context", entity_name=loops.CONTROL_ENTITY)
def loop_control(context: df.DurableEntityContext) -> None:
    state = context.get_state(lambda: None)
    operation = context.operation_name
    if operation == "forget":
        context.destruct_on_exit()
        context.set_result(None)
        return
    if operation == "take":
        if not state:
            context.set_result([])
            return
        new, taken = loops.take_controls(state)
        context.set_state(new)
        context.set_result(taken)
        return
    request = context.get_input() or {}
    try:
        new, accepted = loops.request_control(state, request.get("action"), request.get("id"))
    except ValidationError as exc:  # the API validates; a bad signal changes nothing
        context.set_result({"accepted": False, "error": exc.code})
        return
    if accepted:
        context.set_state(new)
    context.set_result({"accepted": accepted})
