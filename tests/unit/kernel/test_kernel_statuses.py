"""The status vocabulary: one set of values, serialised as the plain strings they name."""

from __future__ import annotations

import json
from typing import get_args

from kernel.common.statuses import (
    FINAL_SUBMISSION_STATUSES,
    TERMINAL_TASK_STATUSES,
    FinalStatusValue,
    SubmissionStatus,
    TaskStatus,
    TaskStatusValue,
    TierValue,
)
from kernel.turn.failures import TIERS


def test_the_request_literals_hold_the_same_values_as_the_enums():
    assert set(get_args(TaskStatusValue)) == {s.value for s in TaskStatus}
    assert set(get_args(FinalStatusValue)) == {s.value for s in FINAL_SUBMISSION_STATUSES}
    assert get_args(TierValue) == TIERS


def test_members_serialise_and_compare_as_plain_strings():
    assert json.dumps({"status": TaskStatus.COMPLETED}) == '{"status": "completed"}'
    assert json.dumps([SubmissionStatus.QUEUED]) == '["queued"]'
    assert "interrupted" in TERMINAL_TASK_STATUSES
    assert "cancelled" in FINAL_SUBMISSION_STATUSES and "active" not in FINAL_SUBMISSION_STATUSES


def test_every_final_submission_status_is_a_terminal_task_status():
    assert FINAL_SUBMISSION_STATUSES < TERMINAL_TASK_STATUSES
