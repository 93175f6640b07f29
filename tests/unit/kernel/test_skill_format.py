"""The skill format: validation that names every problem, references, versions, run rules."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from adapters.skill_store import FileSkillStore, register
from kernel.skills import skill as skills
from kernel.turn import tools


def tool(step_id: str, name: str = "calculator", **arguments: Any) -> dict[str, Any]:
    return {"id": step_id, "kind": "tool", "tool": name, "arguments": arguments}


def skill(*steps: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"name": "s", "steps": list(steps), **extra}


def problems(raw: object) -> list[tuple[str, str]]:
    checked = skills.validate(raw)
    assert isinstance(checked, list), "expected problems"
    return [(p.field, p.message) for p in checked]


def fields(raw: object) -> list[str]:
    return sorted(f for f, _ in problems(raw))


def test_a_valid_skill_parses_to_its_canonical_json_with_defaults() -> None:
    parsed = skills.parse(
        skill(
            tool("a", expression="1+1"),
            {"id": "b", "kind": "event", "event": "go"},
            {"id": "c", "kind": "join", "steps": [{"id": "d", "kind": "timer", "seconds": 1}]},
        )
    )

    canonical = parsed.to_json()
    assert canonical["steps"][0]["retry"] == {
        "maxAttempts": 1,
        "firstRetryS": 1.0,
        "backoff": 2.0,
        "maxRetryS": 300.0,
    }
    assert canonical["steps"][1]["timeoutS"] == 7 * 86400
    assert canonical["steps"][2]["mode"] == "allSettled"
    assert skills.parse(canonical) == parsed  # the stored form parses to the same skill


def test_every_schema_and_rule_problem_is_named_at_once() -> None:
    raw = skill(
        tool("a", "write_document", title="t", text="x"),
        tool("a", expression="1+"),
        {"id": "bad id", "kind": "timer", "seconds": 0},
        {"id": "m", "kind": "model", "prompt": ""},
        tool("l", "append_ledger", text="${steps.zzz.value}"),
        colour="blue",
    )

    assert problems(raw) == [
        ("steps[2].id", "String should match pattern '^[A-Za-z][A-Za-z0-9_-]{0,39}$'"),
        ("steps[2].seconds", "Input should be greater than 0"),
        ("steps[3].prompt", "String should have at least 1 character"),
        ("colour", "Extra inputs are not permitted"),
        (
            "steps[0].tool",
            (
                "'write_document' needs a session, so it cannot run in a skill; "
                "tools a skill can call: calculator, append_ledger"
            ),
        ),
        ("steps[1].id", "duplicate step id 'a' (first at steps[0])"),
        ("steps[1].arguments.expression", "not an arithmetic expression: '1+'"),
        (
            "steps[4].arguments.text",
            "${steps.zzz.value}: step 'zzz' does not end before this step (or does not exist)",
        ),
    ]


def test_the_shape_of_the_whole_is_checked_first() -> None:
    assert problems([]) == [("skill", "a skill is a JSON object")]
    assert fields({"name": "s"}) == ["steps"]
    assert fields(skill()) == ["steps"]
    assert fields(skill({"id": "x"})) == ["steps[0]"]  # no kind: no step
    too_big = skill(tool("a", expression="1" * 70_000))
    assert problems(too_big)[0][0] == "skill"


def test_references_name_declared_inputs_and_steps_that_end_before() -> None:
    raw = skill(
        tool("first", expression="${input.n}"),
        {
            "id": "both",
            "kind": "join",
            "steps": [
                tool("left", expression="${steps.first.value} + 1"),
                tool("right", expression="${steps.left.value}"),  # a sibling: same time
            ],
        },
        tool("after", expression="${steps.left.value} + ${steps.both.mode}"),
        tool("self", expression="${steps.self.value}"),
        tool("odd", expression="${input.missing} ${env.HOME} ${steps.after.value[}"),
        inputs=["n"],
    )

    assert problems(raw) == [
        (
            "steps[1].steps[1].arguments.expression",
            "${steps.left.value}: step 'left' does not end before this step (or does not exist)",
        ),
        (
            "steps[3].arguments.expression",
            "${steps.self.value}: a step cannot refer to its own output",
        ),
        (
            "steps[4].arguments.expression",
            "${input.missing}: no input 'missing' is declared in inputs",
        ),
        (
            "steps[4].arguments.expression",
            "${env.HOME}: a reference is input.<name> or steps.<id>, then .<key> or [<index>]",
        ),
        (
            "steps[4].arguments.expression",
            (
                "${steps.after.value[}: a reference is input.<name> or steps.<id>, then .<key> or "
                "[<index>]"
            ),
        ),
    ]


def test_a_sequence_sees_its_earlier_steps_and_runs_where_it_is_placed() -> None:
    branch = {
        "id": "flow",
        "kind": "sequence",
        "steps": [
            {"id": "wait", "kind": "event", "event": "go"},
            tool("use", expression="${steps.wait.n} + 1"),
        ],
    }
    raw = skill(
        {
            "id": "both",
            "kind": "join",
            "steps": [branch, tool("other", expression="${steps.wait.n}")],
        },
        tool("after", expression="${steps.use.value} * 2"),
    )

    assert problems(raw) == [
        (
            "steps[0].steps[1].arguments.expression",
            "${steps.wait.n}: step 'wait' does not end before this step (or does not exist)",
        )
    ]
    parsed = skills.parse(skill({"id": "both", "kind": "join", "steps": [branch]}))
    assert skills.instance_of_step(parsed, "run", "use") == "run:flow"
    assert skills.instance_of_step(parsed, "run", "flow") == "run:flow"
    assert skills.instance_of_step(parsed, "run", "both") == "run"
    top = skills.parse(skill(branch))
    assert skills.instance_of_step(top, "run", "wait") == "run"
    assert skills.instance_of_step(top, "run", "nowhere") is None


def test_arguments_with_references_are_checked_by_name_until_the_run() -> None:
    raw = skill(
        {"id": "e", "kind": "event", "event": "go"},
        tool("c", expression="${steps.e.x}", colour="red"),
        tool("d", "append_ledger", note="${steps.e.x}"),
    )

    assert problems(raw) == [
        ("steps[1].arguments.colour", "Extra inputs are not permitted"),
        ("steps[2].arguments.note", "Extra inputs are not permitted"),
        ("steps[2].arguments.text", "Field required"),
    ]


def test_a_step_can_narrow_the_replay_policy_but_never_widen_it() -> None:
    narrowed = skill({**tool("a", expression="1"), "replay": "unsafe"})
    widened = skill({**tool("a", "append_ledger", text="x"), "replay": "safe"})

    assert isinstance(skills.validate(narrowed), skills.Skill)
    assert fields(widened) == ["steps[0].replay"]


def test_event_names_and_depth_and_size_are_bounded() -> None:
    wait = {"kind": "event", "event": "go"}
    nested: dict[str, Any] = {"id": "t", "kind": "timer", "seconds": 1}
    for depth in range(5):
        nested = {"id": f"j{depth}", "kind": "join", "steps": [nested]}

    assert fields(skill({**wait, "id": "a"}, {**wait, "id": "b"})) == ["steps[1].event"]
    assert "joins and sequences nest at most 3 deep" in [m for _, m in problems(skill(nested))]
    wide = [
        {
            "id": f"j{i}",
            "kind": "join",
            "steps": [{"id": f"t{i}_{k}", "kind": "timer", "seconds": 1} for k in range(2)],
        }
        for i in range(40)
    ]
    assert problems(skill(*wide)) == [("steps", "120 steps; a skill has at most 100")]


def test_skill_invalid_is_a_400_listing_every_problem() -> None:
    with pytest.raises(skills.SkillInvalid) as caught:
        skills.parse(skill(tool("a", expression="1+"), tool("a", expression="2")))

    body = caught.value.to_dict()
    assert caught.value.http_status == 400
    assert body["error"] == "invalid_skill"
    assert body["field"] == "steps[0].arguments.expression"
    assert [p["field"] for p in body["problems"]] == [
        "steps[0].arguments.expression",
        "steps[1].id",
    ]
    assert body["message"].startswith("2 problems: ")


def test_resolve_keeps_a_whole_reference_typed_and_writes_others_into_text() -> None:
    scope = {"input": {"n": 3}, "steps": {"a": {"value": 42, "items": ["x", {"k": True}]}}}

    assert skills.resolve("${steps.a.value}", scope) == 42
    assert skills.resolve("${steps.a.items[1]}", scope) == {"k": True}
    assert skills.resolve("n=${input.n}, v=${steps.a.value}", scope) == "n=3, v=42"
    assert skills.resolve({"l": ["${steps.a.items[0]}"]}, scope) == {"l": ["x"]}
    with pytest.raises(skills.ReferenceUnresolved, match="no output of step 'b'"):
        skills.resolve("${steps.b.value}", scope)
    with pytest.raises(skills.ReferenceUnresolved, match="no 'nope' in the value"):
        skills.resolve("${steps.a.nope}", scope)


def test_versions_count_up_and_the_same_definition_adds_none() -> None:
    definition = skills.parse(skill(tool("a", expression="1"))).to_json()
    digest = skills.digest(definition)

    assert skills.next_version([]) == 1
    assert skills.next_version([1, 2, 5]) == 6
    assert skills.registration(None, digest) == "new"
    assert skills.registration({"digest": digest}, digest) == "same"
    assert skills.registration({"digest": "sha256:other"}, digest) == "new"
    reordered = json.loads(json.dumps(definition, sort_keys=True))
    assert skills.digest(reordered) == digest


def test_the_file_registry_stores_versions_once(tmp_path: Path) -> None:
    store = FileSkillStore(tmp_path)
    one = skills.parse(skill(tool("a", expression="1")))
    two = skills.parse(skill(tool("a", expression="2")))
    by = {"via": "test"}

    first, created1 = register(store, one, by, "t1")
    again, created2 = register(store, one, by, "t2")
    second, created3 = register(store, two, by, "t3")
    back, created4 = register(store, one, by, "t4")  # v1's definition again: a new version

    assert [first["version"], again["version"], second["version"], back["version"]] == [1, 1, 2, 3]
    assert [created1, created2, created3, created4] == [True, False, True, True]
    assert store.versions("s") == [1, 2, 3] and store.names() == ["s"]
    assert store.read("s", 1) == first
    assert store.create({**first, "definition": {}}) is False  # a version never changes
    assert store.read("s", 1) == first


def test_run_rules() -> None:
    policy = skills.Retry.model_validate(
        {"maxAttempts": 3, "firstRetryS": 1, "backoff": 2, "maxRetryS": 3}
    )
    parsed = skills.parse(
        skill(
            tool("a", expression="1"),
            {"id": "j", "kind": "join", "steps": [{"id": "w", "kind": "event", "event": "go"}]},
            inputs=["who"],
        )
    )

    assert [skills.retry_delay(policy, n) for n in (1, 2, 3)] == [1.0, 2.0, None]
    assert skills.tool_retryable({"ok": False, "kind": "tool_error"})
    assert not skills.tool_retryable({"ok": False, "kind": "interrupted"})
    assert skills.model_retryable({"ok": False, "kind": "rate_limited"})
    assert not skills.model_retryable({"ok": False, "kind": "fatal"})
    assert skills.instance_of_step(parsed, "run", "a") == "run"
    assert skills.instance_of_step(parsed, "run", "w") == "run:w"
    assert skills.event_step(parsed, "go").id == "w"
    assert skills.run_input_problems(parsed, {}) == [
        skills.Problem("input.who", "this input is declared by the skill and required")
    ]
    assert skills.run_id("s", "r1") == skills.run_id("s", "r1") != skills.run_id("s", "r2")


def test_register_skill_is_a_tool_that_needs_approval_and_names_every_problem() -> None:
    spec = tools.TOOLS["register_skill"]
    ok, _ = tools.validate_call("register_skill", {"skill": skill(tool("a", expression="1"))})
    bad, error = tools.validate_call(
        "register_skill", {"skill": skill(tool("a", expression="1+"), tool("a", expression="1"))}
    )

    assert (spec.policy, spec.requires_approval) == ("safe", True)
    assert ok and not bad
    listed: Any = error["problems"]
    assert [p["field"] for p in listed] == [
        "skill.steps[0].arguments.expression",
        "skill.steps[1].id",
    ]


def test_a_run_holds_a_declared_limit_once_per_try_of_each_limited_tool_step() -> None:
    parsed = skills.parse(
        skill(
            tool("calc", expression="1"),  # no declared limit
            {**tool("log", "append_ledger", text="${input.who}"), "retry": {"maxAttempts": 2}},
            {
                "id": "j",
                "kind": "join",
                "steps": [tool("branch_log", "append_ledger", text="x")],
            },
            inputs=["who"],
        )
    )

    assert skills.limit_holders(parsed, "run") == [
        {"key": "tool-ledger", "holder": "run:log:1"},
        {"key": "tool-ledger", "holder": "run:log:2"},
        {"key": "tool-ledger", "holder": "run:branch_log:branch_log:1"},
    ]
