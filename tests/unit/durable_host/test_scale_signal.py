"""The scale signal's pure part: how many hosts a hub's waiting work wants."""

from __future__ import annotations

from datetime import UTC, datetime

from durable_host.cluster import scale


def test_orchestration_work_wants_at_most_one_host_per_partition():
    hosts, _ = scale.recommend(4, {0: 50, 1: 3, 2: 9, 3: 1}, 0, 10)
    assert hosts == 4
    assert scale.recommend(4, {0: 500}, 0, 10)[0] == 1  # one busy partition: one host


def test_activity_work_scales_beyond_the_partitions():
    assert scale.recommend(4, {0: 1}, 95, 10)[0] == 10


def test_nothing_waiting_scales_to_zero_unless_work_runs():
    assert scale.recommend(4, {}, 0, 10) == (0, "nothing waits and nothing runs: scale to zero")
    assert scale.recommend(4, {}, 0, 10, running=1)[0] == 1


def test_view_turns_oldest_ids_into_ages():
    now = datetime(2026, 1, 1, tzinfo=UTC)
    ten_seconds_ago = int((now.timestamp() - 10) * 1_000_000) * 1000 + 7
    answer = scale.view(
        partition_count=2,
        backlog={
            "partitions": [
                {"partition": 0, "owner": "a", "backlog": 2, "oldest": ten_seconds_ago},
                {"partition": 1, "owner": "b", "backlog": 0, "oldest": None},
            ],
            "activities": {"backlog": 0, "oldest": None},
            "hosts": [],
        },
        max_activities=10,
        running=0,
        now=now,
    )
    assert answer["partitions"][0]["oldestAgeSeconds"] == 10.0
    assert answer["partitions"][1]["oldestAgeSeconds"] is None
    assert answer["recommendedHosts"] == 1
