"""The queue trigger: one listener per queue-triggered function, as the extension's QueueListener. IO.

A listener receives up to ``batchSize`` messages at a time, each hidden for the lease
(``DURABLE_HOST_QUEUE_LEASE_SECONDS``, the extension's 10 minutes) and renewed at half of it
while its function runs, and receives again once no more than ``newBatchThreshold`` are in
flight. An empty receive backs off as the extension's randomized exponential strategy does
(``Backoff``: from 100 ms towards ``maxPollingInterval``; any message found resets it); a
message this host sends to the queue through an output binding wakes the listener at once.

Per message (the extension's QueueProcessor):

* received with ``DequeueCount`` above ``maxDequeueCount`` - moved to ``<queue>-poison``
  without running;
* the function succeeded - the message is deleted, and only then;
* it failed - at ``DequeueCount >= maxDequeueCount`` the message is copied to
  ``<queue>-poison`` (created when missing) and deleted; before that it is made visible again
  after ``visibilityTimeout``. A queue without a poison queue (its name ends in ``-poison`` or
  has no room for the suffix) keeps a failed message hidden until its lease ends.
* the host dies - nothing is deleted: the message reappears when its lease ends and runs
  again on whichever host receives it, its ``DequeueCount`` one higher.

Several hosts share a queue simply by receiving from it: the queue service hands each
message to one receiver at a time. The function gets a ``func.QueueMessage`` (id, body,
dequeue count, insertion, expiry and next-visible times, pop receipt); its binding data are
those fields (``Id``, ``DequeueCount``...), ``QueueTrigger`` (the text) and, for a JSON object
body, its properties.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
from collections.abc import Awaitable, Callable
from typing import Any

from azure.core.exceptions import HttpResponseError, ResourceExistsError, ResourceNotFoundError
from azure.functions.queue import QueueMessage

from durable_host.functions.loader import FunctionInfo
from durable_host.triggers.storage.binder import decode_message
from durable_host.triggers.storage.options import MIN_POLLING, QueueOptions
from durable_host.triggers.storage.spec import Binding

log = logging.getLogger("durable_host.storage")
Invoke = Callable[[FunctionInfo, Any, dict[str, Any]], Awaitable[Any]]
POISON_SUFFIX = "-poison"


class Backoff:
    """The extension's randomized exponential back-off (minimum 100 ms, delta the minimum,
    randomized by 20%): reset by a found message, grows by powers of two up to the maximum."""

    def __init__(self, maximum: float, minimum: float = MIN_POLLING, rng: Any = random) -> None:
        self.minimum, self.maximum, self.rng = minimum, max(minimum, maximum), rng
        self.exponent, self.current = 0, minimum

    def next(self, found: bool) -> float:
        if found:
            self.exponent, self.current = 0, self.minimum
            return self.current
        if self.current < self.maximum:
            delta = (2**self.exponent - 1) * self.rng.uniform(0.8, 1.2) * self.minimum
            self.current = min(self.minimum + delta, self.maximum)
            self.exponent += 1
        return self.current


def poison_queue_name(queue: str) -> str | None:
    if queue.endswith(POISON_SUFFIX) or len(queue) + len(POISON_SUFFIX) > 63:
        return None
    return queue + POISON_SUFFIX


def trigger_metadata(message: Any, body: str | bytes) -> dict[str, Any]:
    data: dict[str, Any] = {}
    if isinstance(body, str):
        with contextlib.suppress(ValueError):
            parsed = json.loads(body)
            if isinstance(parsed, dict):
                data.update(parsed)
    data.update(
        QueueTrigger=body if isinstance(body, str) else None,
        Id=message.id,
        DequeueCount=message.dequeue_count,
        InsertionTime=message.inserted_on,
        ExpirationTime=message.expires_on,
        NextVisibleTime=message.next_visible_on,
        PopReceipt=message.pop_receipt,
    )
    return data


class QueueListener:
    def __init__(
        self,
        info: FunctionInfo,
        binding: Binding,
        queues: Any,  # the connection's async QueueServiceClient
        options: QueueOptions,
        invoke: Invoke,
    ) -> None:
        self.info, self.binding, self.options, self.invoke = info, binding, options, invoke
        self.queue_name = binding.queue
        self.queue = queues.get_queue_client(self.queue_name)
        poison = poison_queue_name(self.queue_name)
        self.poison = queues.get_queue_client(poison) if poison else None
        self.backoff = Backoff(options.max_polling_interval)
        self.in_flight: set[asyncio.Task[None]] = set()
        self.stats = {"succeeded": 0, "failed": 0, "poisoned": 0}
        self._wake = asyncio.Event()
        self._stopping = False

    def notify(self) -> None:
        self._wake.set()

    async def run(self) -> None:
        found = False
        while not self._stopping:
            try:
                while len(self.in_flight) > self.options.new_batch_threshold:
                    await asyncio.wait(self.in_flight, return_when=asyncio.FIRST_COMPLETED)
                if self._stopping:
                    break  # stopping: take no new message
                found = await self._receive()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - a storage outage must not end the listener
                log.warning("queue %s: receive failed: %s", self.queue_name, exc)
                found = False
            if found:
                continue  # messages came: ask again as soon as the threshold allows
            await self._pause(self.backoff.next(False))
        await self._drain()

    async def _pause(self, seconds: float) -> None:
        self._wake.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), seconds)
        if self._wake.is_set():
            self.backoff.next(True)

    async def _receive(self) -> bool:
        try:
            pages = self.queue.receive_messages(
                messages_per_page=self.options.batch_size,
                max_messages=self.options.batch_size,
                visibility_timeout=int(self.options.lease_seconds),
            )
            batch = [m async for m in pages]
        except ResourceNotFoundError:
            return False  # no queue yet: back off, as the extension does
        for message in batch:
            task = asyncio.create_task(self._process(message))
            self.in_flight.add(task)
            task.add_done_callback(self.in_flight.discard)
        if batch:
            self.backoff.next(True)
        return bool(batch)

    async def _process(self, message: Any) -> None:
        holder = {"message": message}
        try:
            if self.poison is not None and message.dequeue_count > self.options.max_dequeue_count:
                await self._to_poison(message)
                return
            renew = asyncio.create_task(self._renew(holder))
            try:
                ok = await self._run(message)
            finally:
                renew.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await renew
            current = holder["message"]
            if ok:
                self.stats["succeeded"] += 1
                await self._delete(current)
            elif (
                self.poison is not None and message.dequeue_count >= self.options.max_dequeue_count
            ):
                self.stats["failed"] += 1
                await self._to_poison(current)
            elif self.poison is not None:
                self.stats["failed"] += 1
                await self._release(current)
            else:
                self.stats["failed"] += 1
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the message stays; its lease ends, it runs again
            log.warning("queue %s: message %s: %s", self.queue_name, message.id, exc)

    async def _run(self, message: Any) -> bool:
        try:
            body = decode_message(message.content or "", self.options.message_encoding)
        except ValueError as exc:
            log.error(
                "function %s: queue message %s is not %s: %s",
                self.info.name,
                message.id,
                self.options.message_encoding,
                exc,
            )
            return False
        value = QueueMessage(  # type: ignore[no-untyped-call]
            id=message.id,
            body=body,
            dequeue_count=message.dequeue_count,
            expiration_time=message.expires_on,
            insertion_time=message.inserted_on,
            time_next_visible=message.next_visible_on,
            pop_receipt=message.pop_receipt,
        )
        try:
            await self.invoke(self.info, value, trigger_metadata(message, body))
        except Exception:
            log.exception(
                "function %s failed on queue message %s (dequeue count %s)",
                self.info.name,
                message.id,
                message.dequeue_count,
            )
            return False
        return True

    async def _renew(self, holder: dict[str, Any]) -> None:
        """Keep the message hidden while its function runs (renewed at half the lease)."""
        while True:
            await asyncio.sleep(self.options.lease_seconds / 2)
            message = holder["message"]
            try:
                receipt = await self.queue.update_message(
                    message.id,
                    pop_receipt=message.pop_receipt,
                    visibility_timeout=int(self.options.lease_seconds),
                )
            except HttpResponseError as exc:
                log.warning("queue %s: could not renew %s: %s", self.queue_name, message.id, exc)
                continue
            message.pop_receipt = receipt.pop_receipt
            message.next_visible_on = receipt.next_visible_on

    async def _delete(self, message: Any) -> None:
        try:
            await self.queue.delete_message(message.id, message.pop_receipt)
        except (ResourceNotFoundError, HttpResponseError) as exc:
            # Another receiver took it over (its lease ended) or it is gone: theirs now.
            log.debug("queue %s: delete of %s: %s", self.queue_name, message.id, exc)

    async def _release(self, message: Any) -> None:
        try:
            await self.queue.update_message(
                message.id,
                pop_receipt=message.pop_receipt,
                visibility_timeout=int(self.options.visibility_timeout),
            )
        except (ResourceNotFoundError, HttpResponseError) as exc:
            log.debug("queue %s: release of %s: %s", self.queue_name, message.id, exc)

    async def _to_poison(self, message: Any) -> None:
        assert self.poison is not None
        log.warning(
            "Message has reached MaxDequeueCount of %d. Moving message to queue '%s'.",
            self.options.max_dequeue_count,
            self.poison.queue_name,
        )
        try:
            await self.poison.send_message(message.content)
        except ResourceNotFoundError:
            with contextlib.suppress(ResourceExistsError):
                await self.poison.create_queue()
            await self.poison.send_message(message.content)
        self.stats["poisoned"] += 1
        await self._delete(message)

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()

    async def _drain(self) -> None:
        if self.in_flight:
            await asyncio.gather(*self.in_flight, return_exceptions=True)

    async def backlog(self) -> dict[str, Any]:
        """The queue's length and its oldest visible message's age (``peek``)."""
        try:
            props = await self.queue.get_queue_properties()
            peeked = await self.queue.peek_messages(max_messages=1)
        except ResourceNotFoundError:
            return {"length": 0, "oldest": None}
        oldest = peeked[0].inserted_on if peeked else None
        return {"length": int(props.approximate_message_count or 0), "oldest": oldest}
