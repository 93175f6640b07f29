"""The storage triggers' part of ``GET /admin/host/scale``. Pure (no SDK: the server imports it).

``merge(answer, backlog)`` adds ``queues`` (per queue-triggered function: its queue, the
approximate length and the oldest visible message's age in seconds - what KEDA's
``azure-queue`` scaler reads too) and ``blobs`` (per blob-triggered function: blobs not yet
handled at its last scan) to the task hub's answer, and raises ``recommendedHosts`` when the
storage triggers want more: one host per ``batchSize + newBatchThreshold`` messages, the most
one host runs at once, as the extension's target-based scaler counts; one host when a blob
waits.
"""

from __future__ import annotations

from typing import Any


def merge(answer: dict[str, Any], backlog: dict[str, Any]) -> dict[str, Any]:
    out = dict(answer)
    out["queues"], out["blobs"] = backlog["queues"], backlog["blobs"]
    wanted = int(backlog.get("recommendedHosts") or 0)
    if wanted > int(out.get("recommendedHosts") or 0):
        out["recommendedHosts"] = wanted
        out["reason"] = f"{out.get('reason', '')}; storage triggers have work waiting"
    return out
