"""The preview rules: coalescing, identity, when a preview is superseded, the readers' tag."""

from __future__ import annotations

import itertools

import pytest

from kernel.common import ids
from kernel.common.errors import ValidationError
from kernel.session import previews as rules

SESSION = "s1"
SUB = ids.submission_id(SESSION, "r1")
ROUND = f"{ids.turn_instance_id(SESSION, SUB)}:run:round-2"
TOOL = ids.tool_task_id(SUB, 2, 0)


def preview(kind: rules.PreviewKind = rules.MODEL_TEXT, task: str = ROUND, seq: int = 1) -> dict:
    return rules.record(
        session_id=SESSION,
        task=task,
        kind=kind,
        submission_id=SUB,
        seq=seq,
        text="partial",
        at="2026-01-01T00:00:00.000000Z",
        round_no=2,
    )


def state(tasks: dict, active: str | None = SUB) -> dict:
    return {"active_submission": active, "tasks": tasks}


# --- coalescing ---------------------------------------------------------------------------


def test_the_first_update_is_written_at_once_and_later_ones_once_per_interval() -> None:
    c = rules.Coalescer(interval_s=0.1)
    c.offer("a")
    assert c.take(10.0) == "a"
    c.offer("ab")
    c.offer("abc")
    assert c.due_in(10.04) == pytest.approx(0.06)
    assert c.take(10.04) is None  # not yet: one write per interval
    assert c.take(10.1) == "abc"  # the newest text; "ab" is dropped (lossy by design)
    assert c.writes == 2


def test_nothing_pending_means_nothing_to_write() -> None:
    c = rules.Coalescer(interval_s=0.1)
    assert c.due_in(0.0) is None
    assert c.take(0.0) is None
    c.offer("x")
    c.take(0.0)
    assert c.due_in(5.0) is None


def test_a_steady_stream_is_written_at_most_once_per_interval() -> None:
    c = rules.Coalescer(interval_s=0.1)
    written: list[tuple[float, str]] = []
    for i in range(1, 101):  # a chunk every 10 ms for a second
        now = i * 0.01
        c.offer("x" * i)
        text = c.take(now)
        if text is not None:
            written.append((now, text))
    times = [t for t, _ in written]
    assert all(b - a >= 0.1 - 1e-9 for a, b in itertools.pairwise(times))
    assert 9 <= len(written) <= 11
    assert [len(t) for _, t in written] == sorted(len(t) for _, t in written)  # only grows


# --- identity -------------------------------------------------------------------------------


def test_a_model_calls_attempt_key_names_its_round_task() -> None:
    key = f"nonce-1:{SUB}:model:2.1:3"
    assert rules.model_preview_task(SESSION, key) == (ROUND, SUB, 2)
    retried = rules.model_preview_task(SESSION, f"nonce-1:{SUB}:model:2.3:1")
    assert retried is not None and retried[0] == f"{ROUND}.3"


@pytest.mark.parametrize("key", ["", "x", f"n:{SUB}:tool:2:0:1", f"n:{SUB}:model:2:1"])
def test_a_key_that_is_not_a_rounds_streams_no_preview(key: str) -> None:
    assert rules.model_preview_task(SESSION, key) is None


def test_a_tool_task_id_names_its_submission() -> None:
    assert rules.tool_preview_submission(TOOL) == SUB
    assert rules.tool_preview_submission("no-tool-here") is None


def test_a_long_text_is_clipped_and_says_so() -> None:
    text, cut = rules.clip("y" * (rules.MAX_PREVIEW_CHARS + 5))
    assert len(text) == rules.MAX_PREVIEW_CHARS and cut
    assert rules.clip("short") == ("short", False)


def test_a_damaged_record_is_dropped() -> None:
    assert rules.valid_record(preview()) is not None
    assert rules.valid_record({"task": "x"}) is None
    assert rules.valid_record({**preview(), "seq": 0}) is None
    assert rules.valid_record({**preview(), "kind": "other"}) is None
    assert rules.valid_record([1]) is None


# --- superseded ---------------------------------------------------------------------------


def test_model_text_lives_while_its_round_is_requesting() -> None:
    requesting = {ROUND: {"status": "running", "phase": "request"}}
    assert rules.is_live(preview(), state(requesting))


@pytest.mark.parametrize(
    "tasks, active",
    [
        ({ROUND: {"status": "running", "phase": "answer"}}, SUB),  # the response landed
        ({ROUND: {"status": "running", "phase": "tools"}}, SUB),
        ({ROUND: {"status": "completed", "phase": "answer"}}, SUB),
        ({}, SUB),  # sealed away: terminal
        ({ROUND: {"status": "running", "phase": "request"}}, None),  # the submission ended
        ({ROUND: {"status": "running", "phase": "request"}}, "another"),
    ],
)
def test_model_text_is_superseded_once_its_fact_landed_or_cannot(tasks, active) -> None:
    assert not rules.is_live(preview(), state(tasks, active))


def test_tool_progress_lives_while_the_tool_task_runs() -> None:
    progress = preview(rules.TOOL_PROGRESS, TOOL)
    assert rules.is_live(progress, state({TOOL: {"status": "running", "phase": "accepted"}}))
    assert not rules.is_live(progress, state({TOOL: {"status": "completing"}}))
    assert not rules.is_live(progress, state({TOOL: {"status": "completed"}}))
    assert not rules.is_live(progress, None)


def test_split_live_orders_the_live_ones_and_names_the_rest() -> None:
    tasks = {
        ROUND: {"status": "running", "phase": "tools"},
        TOOL: {"status": "running", "phase": "accepted"},
    }
    live, gone = rules.split_live([preview(), preview(rules.TOOL_PROGRESS, TOOL)], state(tasks))
    assert [p["task"] for p in live] == [TOOL]
    assert [p["task"] for p in gone] == [ROUND]


# --- the tag --------------------------------------------------------------------------------


def test_the_tag_changes_with_every_write_and_is_empty_for_none() -> None:
    assert rules.preview_tag([]) == ""
    first = rules.preview_tag([preview(seq=1)])
    assert first != rules.preview_tag([preview(seq=2)])
    assert rules.parse_tag(first) == first
    assert rules.parse_tag("") == ""
    assert rules.parse_tag(None) is None


@pytest.mark.parametrize("bad", ["zz", "0" * 15, "g" * 16, " "])
def test_a_bad_tag_is_refused_naming_the_parameter(bad: str) -> None:
    with pytest.raises(ValidationError) as caught:
        rules.parse_tag(bad)
    assert caught.value.field == "previews"


def test_settings_default_off_and_refuse_bad_values() -> None:
    assert rules.PreviewSettings.from_settings({}) == rules.PreviewSettings()
    on = rules.PreviewSettings.from_settings(
        {"AGENT_PREVIEWS": "on", "AGENT_PREVIEW_INTERVAL_MS": "250"}
    )
    assert on.enabled and on.interval_s == 0.25
    for bad in ({"AGENT_PREVIEWS": "maybe"}, {"AGENT_PREVIEW_INTERVAL_MS": "5"}):
        with pytest.raises(rules.PreviewSettingsError):
            rules.PreviewSettings.from_settings(bad)
