"""Run one activity work item and turn its outcome into the completion message. IO.

Input and output are converted exactly as the worker's ``ActivityTriggerConverter``
does (input: ``df_loads`` of the JSON text, raw string if it is not JSON; output:
``df_dumps``), and failures become ``TaskFailed`` with the extension's reason text
(``Activity function '<name>' failed: <message>``). ``BuiltIn::HttpActivity`` - the
durable HTTP call - is performed here too; a call with a ``token_source`` gets a bearer token
for its resource from the host's credential (``identity_tokens``), added to the outgoing
request only (never to what is recorded), or fails naming the resource when none can be had.

A ``functionTimeout`` bounds every run: when it passes, the activity fails with the
Functions host's text (``Timeout value of 00:05:00 was exceeded by function:
Functions.<name>``). An async activity is cancelled; a sync one runs on a daemon thread
that nothing can stop, so it runs on in the background, its result is discarded (the
task already failed) and it no longer counts against ``maxConcurrentActivityFunctions``.
(The Functions host restarts the whole worker process instead.)
"""

from __future__ import annotations

import asyncio
import json
import traceback
from collections.abc import Callable
from typing import Any

import aiohttp
from azure.functions import meta
from azure.functions.durable_functions import ActivityTriggerConverter

from durable_host.core import history as h
from durable_host.core.records import ActivityWork, MessageKind
from durable_host.functions import identity_tokens, invocation
from durable_host.functions.loader import AppIndex

HTTP_ACTIVITY = "BuiltIn::HttpActivity"


async def run(
    index: AppIndex,
    work: ActivityWork,
    *,
    client_json: Callable[[], str],
    app_dir: str,
    timeout: float | None,
    now: Callable[[], str],
) -> dict[str, Any]:
    """Run ``work``; return the inbox message (TaskCompleted or TaskFailed) for its instance."""
    try:
        # ``asyncio.timeout``, not ``wait_for``: no task of its own for every run.
        async with asyncio.timeout(timeout or None):
            result = await _dispatch(index, work, client_json, app_dir)
        event = h.task_completed(work.task_id, now(), result)
    except TimeoutError:
        message = (
            f"Timeout value of {_timespan(timeout or 0)} was exceeded by function:"
            f" Functions.{work.name}"
        )
        event = _failed(work, now(), message, message)
    except Exception as exc:  # noqa: BLE001 - user-code failure is data
        event = _failed(work, now(), str(exc) or type(exc).__name__, traceback.format_exc())
    return {"kind": MessageKind.EVENT, "event": event, "execution_id": work.execution_id}


def _timespan(seconds: float) -> str:
    """Seconds as .NET prints a TimeSpan: ``hh:mm:ss`` (``d.hh:mm:ss`` past a day)."""
    whole = int(seconds)
    days, rest = divmod(whole, 86400)
    text = f"{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
    return f"{days}.{text}" if days else text


def _failed(work: ActivityWork, at: str, message: str, details: str) -> dict[str, Any]:
    reason = f"Activity function '{work.name}' failed: {message}"
    return h.task_failed(work.task_id, at, reason, details)


async def _dispatch(
    index: AppIndex, work: ActivityWork, client_json: Callable[[], str], app_dir: str
) -> str:
    if work.name == HTTP_ACTIVITY:
        return await _http_call(json.loads(work.input_json or "{}"))
    info = index.activity(work.name)
    if info is None:
        raise LookupError(
            f"The function '{work.name}' doesn't exist, is disabled, or is not an activity function."
        )
    if info.disabled:
        raise LookupError(f"The function '{work.name}' is disabled.")
    value = ActivityTriggerConverter.decode(
        meta.Datum(value=work.input_json if work.input_json is not None else "null", type="json"),
        trigger_metadata=None,
    )
    # Binding data of an activity: its input's properties when the input is a JSON object.
    result = await invocation.invoke(
        info,
        value,
        client_json,
        app_dir,
        metadata=lambda: {
            "instanceId": work.instance_id,
            **(value if isinstance(value, dict) else {}),
        },
        daemon=True,
    )
    encoded = ActivityTriggerConverter.encode(result, expected_type=None).value
    # The extension stores the output re-serialized compactly.
    return json.dumps(json.loads(encoded), separators=(",", ":"))


async def _http_call(request: dict[str, Any]) -> str:
    sent = dict(request.get("headers") or {})
    source = request.get("tokenSource")
    if source:
        token = await identity_tokens.bearer_token(str(source.get("resource") or ""))
        sent["Authorization"] = f"Bearer {token}"
    content = request.get("content")
    async with (
        aiohttp.ClientSession() as session,
        session.request(
            request.get("method", "GET"),
            request["uri"],
            data=content.encode() if isinstance(content, str) else None,
            headers=sent or None,
        ) as response,
    ):
        body = await response.text()
        headers: dict[str, Any] = {}
        for key in response.headers:
            values = response.headers.getall(key)
            headers[key] = values[0] if len(values) == 1 else values
        return json.dumps({"statusCode": response.status, "headers": headers, "content": body})
