"""The app ``bench/queues.py`` drives: one queue-triggered function that does no work but note,
in a local file (``QUEUE_BENCH_LOG``), when its message was enqueued (the message's body), when
it started and which process ran it."""

import json
import os
import time

import azure.functions as func

app = func.FunctionApp()


@app.queue_trigger(arg_name="msg", queue_name="bench", connection="BenchStorage")
def on_message(msg: func.QueueMessage) -> None:
    started = time.time()
    body = json.loads(msg.get_body())
    line = json.dumps(
        {"i": body["i"], "sent": body["sent"], "started": started, "pid": os.getpid()}
    )
    with open(os.environ["QUEUE_BENCH_LOG"], "a") as log:
        log.write(line + "\n")
