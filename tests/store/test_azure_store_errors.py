"""Azure store: a completion that fails with a store error leaves its work item with the
run that holds it - ``poll`` must not hand it to a second run while the first retries."""

from __future__ import annotations

from typing import Any

import pytest

from durable_host.core.orchestration import Episode
from durable_host.store.azure.codec import partition_key
from durable_host.store.azure.errors import StoreUnavailableError
from durable_host.store.azure.faults import LostResponses
from tests.store.contract_support import T0, activity, started


@pytest.fixture
def kind() -> str:
    return "azure"


def test_a_failed_completion_keeps_its_work_item_handed(run_store) -> None:
    async def body(store: Any) -> None:
        await started(store, "a")
        episode = Episode(outbox=[activity("a", 0)], status="Running")
        [work] = await store.commit_episode("a", episode, T0)
        result = {"kind": "event", "event": {"EventType": 5, "TaskScheduledId": 0}}
        store.retry_seconds = store.tables.retry_seconds = 0
        store.tables.faults = LostResponses("request@1")

        with pytest.raises(StoreUnavailableError):
            await store.complete_activity(work.work_id, "a", result, T0)

        found = await store.discovery.survey(partition_key("a"), T0)
        assert found.work and [r for r in found.work if not store.work.is_handed(r)] == []
        assert await store.complete_activity(work.work_id, "a", result, T0) is True

    run_store(body)
