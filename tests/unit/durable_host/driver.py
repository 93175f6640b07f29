"""Drive an orchestrator through episodes with no IO: a pure test double of the engine.

``Driver`` keeps one instance's history and inbox in memory, runs ``run_episode`` for
each batch of messages, and lets a test answer activities and deliver timers/events
explicitly - so histories can be compared event by event with what the extension writes.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import azure.durable_functions as df

from durable_host.core import history as h
from durable_host.core import orchestration as o

T0 = "2024-01-01T00:00:00.000000Z"


def handle_of(fn: Callable[..., Any]) -> Callable[[str], str]:
    return df.Orchestrator.create(fn)


@dataclass
class Driver:
    handle: Callable[[str], str] | None
    name: str = "orch"
    instance_id: str = "i1"
    status: str | None = None
    execution_id: str | None = None
    history: list[dict[str, Any]] = field(default_factory=list)
    activities: list[dict[str, Any]] = field(default_factory=list)
    messages: list[o.Outgoing] = field(default_factory=list)
    output: Any = None
    custom_status: Any = None
    episodes: int = 0
    now: str = T0

    def start(self, input_value: Any = None, raw_input: str | None = None) -> o.Episode:
        input_json = raw_input if raw_input is not None else json.dumps(json.dumps(input_value))
        event = h.execution_started(
            at=self.now,
            name=self.name,
            instance_id=self.instance_id,
            execution_id="",
            input_json=input_json if input_value is not None or raw_input else None,
            version="",
        )
        return self.deliver({"kind": "start", "event": event})

    def deliver(self, *messages: dict[str, Any]) -> o.Episode:
        view = o.InstanceView(
            self.instance_id, self.status, self.execution_id, list(self.history), self.name
        )
        numbered = list(enumerate(messages))
        episode = o.run_episode(self.handle, view, numbered, self.now, f"exec{self.episodes}")
        self.episodes += 1
        if episode.replace_history:
            self.history = []
            self.execution_id = episode.execution_id
        self.history.extend(episode.events)
        self.status = episode.status or self.status
        if episode.status in ("Completed", "Failed", "Terminated"):
            self.output = (
                json.loads(episode.output_json)
                if episode.output_json and episode.status != "Terminated"
                else episode.output_json
            )
        if episode.custom_status_changed:
            self.custom_status = json.loads(episode.custom_status_json or "null")
        self.activities += [m.payload for m in episode.outbox if m.kind == "activity"]
        self.messages += [m for m in episode.outbox if m.kind == "message"]
        return episode

    def complete(self, task_id: int, value: Any) -> o.Episode:
        event = h.task_completed(task_id, self.now, json.dumps(value))
        return self.deliver({"kind": "event", "event": event, "execution_id": self.execution_id})

    def fail(self, task_id: int, message: str, name: str = "act") -> o.Episode:
        event = h.task_failed(
            task_id, self.now, f"Activity function '{name}' failed: {message}", "details"
        )
        return self.deliver({"kind": "event", "event": event, "execution_id": self.execution_id})

    def fire(self, timer_id: int) -> o.Episode:
        event = h.timer_fired(timer_id, self.now, self.now)
        return self.deliver({"kind": "event", "event": event, "execution_id": self.execution_id})

    def raise_event(self, name: str, value: Any) -> o.Episode:
        # The SDK client double-encodes event payloads; the orchestrator sees JSON text.
        event = h.event_raised(self.now, name, json.dumps(json.dumps(value)))
        return self.deliver({"kind": "event", "event": event})

    def scheduled(self) -> list[tuple[int, int, str | None]]:
        """(EventType, EventId, Name) of every scheduling event, in history order."""
        return [
            (e["EventType"], e["EventId"], e.get("Name"))
            for e in self.history
            if e["EventType"] in h.SCHEDULING_TYPES
        ]
