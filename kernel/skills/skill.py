"""Skills as data: the declarative skill format, its validation, versions and run rules. Pure.

A skill is a named list of steps that ``orchestrators/skill_run.py`` executes as one durable
task (``docs/skills.md`` has the format with an example). Its parts:

* the schema (pydantic, camelCase JSON): ``Skill`` with ``steps`` of six kinds - ``tool``,
  ``model``, ``event`` (wait for a named event), ``approval`` (wait for a person), ``timer``,
  ``join`` (child steps run in parallel, ``allSettled`` or ``failFast``) and ``sequence``
  (child steps in order, e.g. as one branch of a join); ``tool`` and
  ``model`` steps carry a ``retry`` policy, ``tool`` steps a ``replay`` policy;
* ``validate(raw) -> Skill | list[Problem]``: the schema *and* the rules a schema cannot say
  (unique step ids and event names, references only to steps that end before, known tools
  that can run outside a session, arguments that fit the tool). It returns **every** problem,
  each with the path of the offending field (``steps[2].arguments.expression``) and a reason;
  ``SkillInvalid`` carries them as the HTTP 400 error. Nothing here raises for bad input.
  The catalogue's ``register_skill`` checks its argument with ``tool_argument_problems``,
  which this module hands to ``kernel.turn.tools`` on import (``tools.use_skill_validator``):
  skills imports the catalogue, so the catalogue cannot import skills;
* references: a string may hold ``${input.<name>...}`` or ``${steps.<id>...}`` (then
  ``.<key>`` or ``[<index>]`` into the value). A string that is one reference becomes the value
  itself (a number stays a number); references inside longer text are written into it
  (``resolve``). ``steps.<id>`` is the output of a step that succeeded;
* versions: ``digest`` (sha256 of the canonical JSON), ``next_version`` and ``registration``
  decide whether a registration adds a version (a different definition) or is the latest one
  again (the same definition: a retried request or a re-run tool adds nothing). Versions are
  1, 2, 3... and never change once stored; a run pins the version it starts with;
* run rules: ``retry_delay``, ``tool_retryable`` / ``model_retryable``, ids of runs and of the
  instances their join branches run in, ``run_input_problems``.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter
from pydantic import ValidationError as PydanticError

from kernel.common import ids, limits
from kernel.common.errors import ValidationError, join_path
from kernel.turn import tools

MAX_SKILL_BYTES = 64 * 1024
MAX_STEPS = 100  # every step, join children included
MAX_DEPTH = 3  # joins and sequences inside each other
DAY_S = 86_400.0
# Tools a skill may call: the ones that need no session. A run belongs to no session (it
# outlives the one that registered it), so the note tools, whose documents live in a session,
# and send_notices, whose plan is a session document, cannot run in a skill.
SKILL_TOOLS = ("calculator", "append_ledger")
KINDS = ("tool", "model", "event", "approval", "timer", "join", "sequence")

_NAME = r"^[a-z0-9][a-z0-9_.-]{0,63}$"
_STEP_ID = r"^[A-Za-z][A-Za-z0-9_-]{0,39}$"
_EVENT = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
_REFERENCE = re.compile(r"\$\{([^}]*)\}")
_SEGMENT = re.compile(r"\.([A-Za-z0-9_-]+)|\[(\d+)\]")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Retry(_Strict):
    """How often a failed step is tried and how long to wait between tries."""

    max_attempts: int = Field(1, ge=1, le=10, alias="maxAttempts")
    first_retry_s: float = Field(1.0, gt=0, le=3600, alias="firstRetryS")
    backoff: float = Field(2.0, ge=1, le=10)
    max_retry_s: float = Field(300.0, gt=0, le=DAY_S, alias="maxRetryS")


class _Step(_Strict):
    id: Annotated[str, Field(pattern=_STEP_ID)]
    description: Annotated[str, Field(max_length=500)] = ""


class ToolStep(_Step):
    kind: Literal["tool"]
    tool: Annotated[str, Field(min_length=1, max_length=64)]
    arguments: dict[str, Any] = Field(default_factory=dict)
    retry: Retry = Field(default_factory=lambda: Retry.model_validate({}))
    # None: the tool's own policy. A step may only narrow it ("unsafe": never re-run blindly).
    replay: Literal["safe", "unsafe"] | None = None


class ModelStep(_Step):
    kind: Literal["model"]
    prompt: Annotated[str, Field(min_length=1, max_length=8000)]
    retry: Retry = Field(default_factory=lambda: Retry.model_validate({}))


class EventStep(_Step):
    kind: Literal["event"]
    event: Annotated[str, Field(pattern=_EVENT)]
    timeout_s: float = Field(7 * DAY_S, gt=0, le=365 * DAY_S, alias="timeoutS")


class ApprovalStep(_Step):
    kind: Literal["approval"]
    message: Annotated[str, Field(max_length=1000)] = ""
    timeout_s: float = Field(7 * DAY_S, gt=0, le=365 * DAY_S, alias="timeoutS")


class TimerStep(_Step):
    kind: Literal["timer"]
    seconds: float = Field(gt=0, le=365 * DAY_S)


class JoinStep(_Step):
    kind: Literal["join"]
    mode: Literal["allSettled", "failFast"] = "allSettled"
    steps: Annotated[list[Step], Field(min_length=1, max_length=20)]


class SequenceStep(_Step):
    kind: Literal["sequence"]
    steps: Annotated[list[Step], Field(min_length=1, max_length=20)]


Step = Annotated[
    ToolStep | ModelStep | EventStep | ApprovalStep | TimerStep | JoinStep | SequenceStep,
    Field(discriminator="kind"),
]


JoinStep.model_rebuild()
SequenceStep.model_rebuild()


class Skill(_Strict):
    name: Annotated[str, Field(pattern=_NAME)]
    description: Annotated[str, Field(max_length=2000)] = ""
    inputs: Annotated[list[Annotated[str, Field(pattern=_STEP_ID)]], Field(max_length=50)] = Field(
        default_factory=list
    )
    steps: Annotated[list[Step], Field(min_length=1, max_length=50)]

    def to_json(self) -> dict[str, Any]:
        """The canonical definition: what is stored, digested and pinned by a run."""
        return self.model_dump(mode="json", by_alias=True)


_STEP: TypeAdapter[Any] = TypeAdapter(Step)


# --- problems --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Problem:
    field: str
    message: str

    def to_dict(self) -> dict[str, str]:
        return {"field": self.field, "message": self.message}


class SkillInvalid(ValidationError):
    """A skill that failed validation: every problem, the first one as ``field`` (HTTP 400)."""

    def __init__(self, problems: list[Problem], code: str = "invalid_skill") -> None:
        count = f"{len(problems)} problem{'s' if len(problems) != 1 else ''}"
        detail = "; ".join(f"{p.field}: {p.message}" for p in problems[:5])
        more = " ..." if len(problems) > 5 else ""
        super().__init__(code, f"{count}: {detail}{more}", problems[0].field if problems else None)
        self.problems = problems

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.problems, self.code))

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "problems": [p.to_dict() for p in self.problems]}


def _path(base: str, loc: tuple[int | str, ...]) -> str:
    # A discriminated union puts the tag after the list index (steps[0].tool.arguments): drop it.
    parts: list[int | str] = []
    for i, part in enumerate(loc):
        if i and isinstance(loc[i - 1], int) and part in KINDS:
            continue
        parts.append(part)
    return join_path(base or None, *parts) or base or "skill"


def _schema_problems(exc: PydanticError, base: str = "") -> list[Problem]:
    return [
        Problem(_path(base, tuple(e["loc"])), e["msg"].removeprefix("Value error, "))
        for e in exc.errors(include_url=False)
    ]


# --- validation ------------------------------------------------------------------------------


def validate(raw: object) -> Skill | list[Problem]:
    """The skill, or every problem found (schema and rules), each with its path."""
    if not isinstance(raw, dict):
        return [Problem("skill", "a skill is a JSON object")]
    try:
        size = len(json.dumps(raw, ensure_ascii=False).encode())
    except (TypeError, ValueError):
        return [Problem("skill", "a skill must be plain JSON")]
    if size > MAX_SKILL_BYTES:
        return [Problem("skill", f"the skill is {size} bytes; at most {MAX_SKILL_BYTES}")]
    try:
        skill: Skill | None = Skill.model_validate(raw)
        problems: list[Problem] = []
    except PydanticError as exc:
        skill, problems = None, _schema_problems(exc)
    # The rules run over every step that parses on its own, so a schema error in one step
    # does not hide a wrong reference in another.
    declared = [i for i in raw.get("inputs") or [] if isinstance(i, str)]
    steps = _parsed_steps(raw.get("steps"))
    problems += _rule_problems(steps, declared)
    if problems or skill is None:
        return problems or [Problem("skill", "invalid skill")]
    return skill


def tool_argument_problems(raw: object) -> list[str]:
    """``validate``'s problems as the tool catalogue reports a tool's argument problems
    (``"skill.<path>: <what is wrong>"``): how ``register_skill`` checks its argument."""
    checked = validate(raw)
    if isinstance(checked, Skill):
        return []
    return [f"skill.{p.field}: {p.message}" for p in checked]


tools.use_skill_validator(tool_argument_problems)


def parse(raw: object) -> Skill:
    """The skill, or ``SkillInvalid`` with every problem."""
    checked = validate(raw)
    if isinstance(checked, Skill):
        return checked
    raise SkillInvalid(checked)


def _parsed_steps(raw: object) -> list[tuple[str, Any]]:
    if not isinstance(raw, list):
        return []
    parsed = []
    for i, item in enumerate(raw):
        try:
            parsed.append((f"steps[{i}]", _STEP.validate_python(item)))
        except PydanticError:
            continue
    return parsed


@dataclass(frozen=True, slots=True)
class _Placed:
    """A step in the tree: its path, depth, and the step ids that have ended before it."""

    path: str
    step: Any
    depth: int
    before: frozenset[str]


def _placed(steps: list[tuple[str, Any]]) -> Iterator[_Placed]:
    """Every step in order, knowing which steps end before it: the earlier steps of its list
    (with their children), never its join siblings, which run at the same time."""

    def walk(items: list[tuple[str, Any]], depth: int, before: frozenset[str]) -> Iterator[_Placed]:
        seen = set(before)
        for path, step in items:
            yield _Placed(path, step, depth, frozenset(seen))
            children = [(f"{path}.steps[{j}]", c) for j, c in enumerate(_children(step))]
            if isinstance(step, JoinStep):  # each child on its own: siblings run at once
                for child in children:
                    yield from walk([child], depth + 1, frozenset(seen))
            elif children:  # a sequence: each child after the ones before it
                yield from walk(children, depth + 1, frozenset(seen))
            seen |= set(_ids(step))

    yield from walk(steps, 0, frozenset())


def _children(step: Any) -> list[Any]:
    return list(step.steps) if isinstance(step, JoinStep | SequenceStep) else []


def _ids(step: Any) -> Iterator[str]:
    yield step.id
    for child in _children(step):
        yield from _ids(child)


def _rule_problems(steps: list[tuple[str, Any]], declared: list[str]) -> list[Problem]:
    problems: list[Problem] = []
    first_at: dict[str, str] = {}
    event_at: dict[str, str] = {}
    total = 0
    for placed in _placed(steps):
        step, path = placed.step, placed.path
        total += 1
        if step.id in first_at:
            problems.append(
                Problem(
                    f"{path}.id", f"duplicate step id {step.id!r} (first at {first_at[step.id]})"
                )
            )
        else:
            first_at[step.id] = path
        if placed.depth > MAX_DEPTH:
            problems.append(Problem(path, f"joins and sequences nest at most {MAX_DEPTH} deep"))
        if isinstance(step, EventStep | ApprovalStep):
            name = step.event if isinstance(step, EventStep) else f"approval:{step.id}"
            if name in event_at:
                problems.append(
                    Problem(
                        f"{path}.event",
                        f"event {name!r} is already waited for at {event_at[name]}; "
                        "each event name is waited for once in a skill",
                    )
                )
            else:
                event_at[name] = path
        if isinstance(step, ToolStep):
            problems += _tool_problems(path, step)
            problems += _reference_problems(f"{path}.arguments", step.arguments, placed, declared)
        if isinstance(step, ModelStep):
            problems += _reference_problems(f"{path}.prompt", step.prompt, placed, declared)
    if total > MAX_STEPS:
        problems.append(Problem("steps", f"{total} steps; a skill has at most {MAX_STEPS}"))
    return problems


def _tool_problems(path: str, step: ToolStep) -> list[Problem]:
    spec = tools.TOOLS.get(step.tool)
    if spec is None or step.tool not in SKILL_TOOLS:
        why = "is not a tool" if spec is None else "needs a session, so it cannot run in a skill"
        known = ", ".join(SKILL_TOOLS)
        return [Problem(f"{path}.tool", f"{step.tool!r} {why}; tools a skill can call: {known}")]
    problems = []
    if step.replay == "safe" and spec.policy == "unsafe":
        problems.append(
            Problem(
                f"{path}.replay",
                f"{step.tool} is unsafe to run twice; a step can only narrow its replay policy",
            )
        )
    if _has_reference(step.arguments):
        # Values are known only when the run reaches the step; the names can be checked now.
        fields = spec.args_model.model_fields
        for key in step.arguments:
            if key not in fields:
                problems.append(
                    Problem(f"{path}.arguments.{key}", "Extra inputs are not permitted")
                )
        for name, info in fields.items():
            if info.is_required() and name not in step.arguments:
                problems.append(Problem(f"{path}.arguments.{name}", "Field required"))
        return problems
    valid, checked = tools.validate_call(step.tool, step.arguments)
    if not valid:
        listed: Any = checked.get("problems") or []
        for problem in listed:
            field = problem.get("field")
            where = f"{path}.arguments" + (f".{field}" if field and field != "arguments" else "")
            problems.append(Problem(where, str(problem.get("message"))))
    return problems


def _strings(value: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """Every string inside ``value`` with its path below ``path``."""
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(item, join_path(path or None, str(key)) or "")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _strings(item, join_path(path or None, i) or "")


def _has_reference(value: Any) -> bool:
    return any(_REFERENCE.search(text) for _, text in _strings(value))


def _reference_problems(
    path: str, value: Any, placed: _Placed, declared: list[str]
) -> list[Problem]:
    problems = []
    for where, text in _strings(value, path):
        for match in _REFERENCE.finditer(text):
            expression = match.group(1).strip()
            error = _reference_error(expression, placed, declared)
            if error:
                problems.append(Problem(where, f"${{{expression}}}: {error}"))
    return problems


def _reference_error(expression: str, placed: _Placed, declared: list[str]) -> str | None:
    parsed = _split_reference(expression)
    if parsed is None:
        return "a reference is input.<name> or steps.<id>, then .<key> or [<index>]"
    root, name, _ = parsed
    if root == "input":
        return None if name in declared else f"no input {name!r} is declared in inputs"
    if name == placed.step.id:
        return "a step cannot refer to its own output"
    if name not in placed.before:
        return f"step {name!r} does not end before this step (or does not exist)"
    return None


def _split_reference(expression: str) -> tuple[str, str, list[int | str]] | None:
    head, dot, rest = expression.partition(".")
    if head not in ("input", "steps") or not dot:
        return None
    name_match = re.match(r"[A-Za-z0-9_-]+", rest)
    if not name_match:
        return None
    tail = rest[name_match.end() :]
    keys: list[int | str] = []
    position = 0
    while position < len(tail):
        segment = _SEGMENT.match(tail, position)
        if not segment:
            return None
        keys.append(segment.group(1) if segment.group(1) is not None else int(segment.group(2)))
        position = segment.end()
    return head, name_match.group(0), keys


# --- references at run time ------------------------------------------------------------------


class ReferenceUnresolved(ValueError):
    """A reference names a value the run does not have (a failed step, a missing key)."""


def resolve(value: Any, scope: dict[str, Any]) -> Any:
    """``value`` with every reference replaced from ``scope`` (``{"input", "steps"}``)."""
    if isinstance(value, dict):
        return {key: resolve(item, scope) for key, item in value.items()}
    if isinstance(value, list):
        return [resolve(item, scope) for item in value]
    if not isinstance(value, str) or "${" not in value:
        return value
    whole = _REFERENCE.fullmatch(value)
    if whole:
        return _lookup(whole.group(1).strip(), scope)

    def text(match: re.Match[str]) -> str:
        found = _lookup(match.group(1).strip(), scope)
        return found if isinstance(found, str) else json.dumps(found, ensure_ascii=False)

    return _REFERENCE.sub(text, value)


def _lookup(expression: str, scope: dict[str, Any]) -> Any:
    parsed = _split_reference(expression)
    if parsed is None:
        raise ReferenceUnresolved(f"${{{expression}}} is not a reference")
    root, name, keys = parsed
    holder = scope.get(root) or {}
    if name not in holder:
        what = "input" if root == "input" else "output of step"
        raise ReferenceUnresolved(f"${{{expression}}}: no {what} {name!r}")
    found = holder[name]
    for key in keys:
        try:
            found = found[key]
        except (KeyError, IndexError, TypeError):
            raise ReferenceUnresolved(f"${{{expression}}}: no {key!r} in the value") from None
    return found


# --- versions --------------------------------------------------------------------------------


def digest(definition: dict[str, Any]) -> str:
    text = json.dumps(definition, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def next_version(existing: list[int]) -> int:
    """Versions count up from 1 and are never reused."""
    return max(existing, default=0) + 1


def registration(latest: dict[str, Any] | None, definition_digest: str) -> Literal["same", "new"]:
    """``same``: the latest stored version holds this definition (register nothing);
    ``new``: store it as the next version."""
    if latest is not None and latest.get("digest") == definition_digest:
        return "same"
    return "new"


def valid_name(name: object) -> str:
    if not isinstance(name, str) or not re.match(_NAME, name):
        raise ValidationError(
            "invalid_skill_name", "a skill name is 1-64 of a-z 0-9 _ . - (lowercase)", "name"
        )
    return name


# --- runs ------------------------------------------------------------------------------------


def run_id(name: str, request_id: str) -> str:
    """A run per (skill, requestId): a retried start finds the run it started."""
    return str(uuid.uuid5(ids.NAMESPACE, f"skill:{name}:{request_id}"))


def run_prefix(name: str) -> str:
    return f"skill:{name}:run:"


def run_instance_id(name: str, run: str) -> str:
    return f"{run_prefix(name)}{run}"


def branch_instance_id(run_instance: str, step_id: str) -> str:
    """A join child runs as its own instance; step ids are unique in a skill."""
    return f"{run_instance}:{step_id}"


def instance_of_step(skill: Skill, run_instance: str, step_id: str) -> str | None:
    """The instance that runs step ``step_id``: the run's, or that of the join child (a
    branch) it is in; a sequence runs its steps in its own instance."""

    def locate(steps: list[Any], instance: str) -> str | None:
        for step in steps:
            if step.id == step_id:
                return instance
            if isinstance(step, JoinStep):
                for child in step.steps:
                    found = locate([child], branch_instance_id(run_instance, child.id))
                    if found:
                        return found
            elif isinstance(step, SequenceStep):
                found = locate(step.steps, instance)
                if found:
                    return found
        return None

    return locate(list(skill.steps), run_instance)


def find_step(skill: Skill, step_id: str) -> Any:
    for step in skill.steps:
        for found in _walk(step):
            if found.id == step_id:
                return found
    return None


def _walk(step: Any) -> Iterator[Any]:
    yield step
    for child in _children(step):
        yield from _walk(child)


def event_step(skill: Skill, event: str) -> Any:
    """The step that waits for ``event`` (names are unique in a skill), or None."""
    for step in skill.steps:
        for found in _walk(step):
            if isinstance(found, EventStep) and found.event == event:
                return found
    return None


def limit_holders(skill: Skill, run_instance: str) -> list[dict[str, str]]:
    """Every ``{"key", "holder"}`` a run may hold or wait for in a declared limit (a tool's
    ``concurrency``): one holder per try of each such tool step. A cancelled run releases
    them all, so its slot goes to the next in line now, not when its lease runs out. A key
    filled from an argument that holds a reference is known only to the run: left out."""
    held = []
    for step in (found for top in skill.steps for found in _walk(top)):
        spec = tools.TOOLS.get(step.tool) if isinstance(step, ToolStep) else None
        if spec is None or spec.concurrency is None:
            continue
        limit = limits.parse_limit(spec.concurrency)
        try:
            key = limits.render_key(limit, {"tool": step.tool, "session": "", **step.arguments})
        except ValidationError:
            continue
        if limit.mode != "singleton" or "${" in key:  # filled from a reference: run-time only
            continue
        instance = instance_of_step(skill, run_instance, step.id) or run_instance
        held += [
            {"key": key, "holder": f"{instance}:{step.id}:{attempt}"}
            for attempt in range(1, step.retry.max_attempts + 1)
        ]
    return held


def run_input_problems(skill: Skill, given: object) -> list[Problem]:
    if not isinstance(given, dict):
        return [Problem("input", "the run's input is a JSON object")]
    return [
        Problem(f"input.{name}", "this input is declared by the skill and required")
        for name in skill.inputs
        if name not in given
    ]


def retry_delay(policy: Retry, attempt: int) -> float | None:
    """Seconds to wait before try ``attempt + 1`` after try ``attempt`` failed; None: no more."""
    if attempt >= policy.max_attempts:
        return None
    return float(min(policy.max_retry_s, policy.first_retry_s * policy.backoff ** (attempt - 1)))


# A tool that was interrupted may or may not have had its effect: trying it again would be the
# blind re-run the ledger exists to prevent. Bad arguments fail the same way every time.
_FINAL_TOOL_KINDS = frozenset({"interrupted", "invalid_arguments", "unknown_tool", "rejected"})


def tool_retryable(result: dict[str, Any]) -> bool:
    return not result.get("ok") and result.get("kind") not in _FINAL_TOOL_KINDS


def model_retryable(result: dict[str, Any]) -> bool:
    return not result.get("ok") and result.get("kind") in ("rate_limited", "transient", "timeout")
