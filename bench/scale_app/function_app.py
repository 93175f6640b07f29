"""The I/O-bound workload of bench/scale_out.py: chains of activities that wait 50 ms."""

import time
from collections.abc import Generator
from typing import Any

import azure.durable_functions as df
import azure.functions as func

app = df.DFApp(http_auth_level=func.AuthLevel.ANONYMOUS)


@app.activity_trigger(input_name="n")
def wait_50ms(n: int) -> int:
    time.sleep(0.05)  # an outbound call, say: the host waits, the CPU does not
    return n


@app.orchestration_trigger(context_name="context")
def io_chain(context: df.DurableOrchestrationContext) -> Generator[Any, Any, Any]:
    steps = int(context.get_input()["steps"])
    for i in range(steps):
        yield context.call_activity("wait_50ms", i)
    return steps
