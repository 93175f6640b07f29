"""The tool catalogue as data, and the validation every tool call passes first. Pure.

Each ``ToolSpec`` names a tool, its argument model (pydantic: tool arguments come from a model
and are untrusted), its replay ``policy`` and whether a person must approve it:

=================  ======  ========  ==========================================================
tool               policy  approval  notes
=================  ======  ========  ==========================================================
calculator         safe    no        pure arithmetic (kernel.turn.calculator)
read_document      safe    no        reads one document; retried, then the operator is told
write_document     safe    no        idempotent upsert: a re-run writes the same content;
                                     retried, then the operator is told
delete_document    safe    yes       idempotent, but destructive, so a person approves it;
                                     retried, then the operator is told
append_ledger      unsafe  no        every run appends a line: never re-run blindly; one
                                     append at a time, in arrival order (``concurrency``)
send_notices       unsafe  no        one e-mail per recipient, 1..50 distinct addresses
register_skill     safe    yes       stores a skill (kernel.skills.skill); the same definition again
                                     adds no version, so a re-run is harmless (docs/skills.md)
list_files         safe    no        the session workspace's committed snapshot (docs/workspace.md)
read_file          safe    no        one file of that snapshot
write_file         safe    no        the tool's host rehydrates the workspace from the committed
edit_file          safe    no        snapshot first and commits a new one with the task, so a
delete_file        safe    no        re-run after a crash starts from the same files; one at a
run_python         safe    no        time per session (``concurrency``). run_python's effects
                                     outside the workspace are not undone (docs/workspace.md)
=================  ======  ========  ==========================================================

Declarations (``concurrency``, ``failure``) are applied by the tool task
(``orchestrators/tool_task.py``) to tasks whose input says ``declarations``; a bad one stops
the app at import, naming the tool and the field.

``policy`` is the replay rule: after a crash left an attempt without a result, a tool is re-run
only if it was ``safe`` when the intent was saved and is ``safe`` now
(``kernel.turn.policy.replay_decision``).

Validation (the tool task's *call* phase) is two steps, and both report problems as values:
1. the argument model checks shape: types, lengths, e-mail syntax, unknown fields (rejected);
2. ``precheck`` checks meaning the schema cannot express (an expression that parses, distinct
   recipients). Each problem is a string ``"<argument>: <what is wrong>"``.
``note_document_id(title)`` names the session document the note tools read and write.

``validate_call`` returns ``(True, final_args)`` — the canonical JSON arguments to save with
the intent and to execute with — or ``(False, error)`` where ``error`` is an envelope
``{"ok": false, "kind": "invalid_arguments"|"unknown_tool"|"tool_not_allowed", "tool",
"field", "message", "problems"}`` whose ``field`` names the first offending argument. Nothing
here raises for bad input from a model. ``allowed`` (a run's declared tools, e.g. a loop's)
narrows the catalogue: a call of any other tool is ``tool_not_allowed`` and never runs;
``openai_tool_specs(allowed)`` offers the model only those.
"""

from __future__ import annotations

import re
import uuid
from collections import Counter
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    WithJsonSchema,
)

from kernel.common import ids
from kernel.common.errors import join_path
from kernel.common.limits import parse_limit
from kernel.session import documents
from kernel.turn import calculator
from kernel.turn.failures import FailurePolicy
from kernel.turn.model_io import JsonObject, JsonValue
from kernel.workspace import files as workspace

ToolPolicy = Literal["safe", "unsafe"]
ArgsT = TypeVar("ArgsT", bound=BaseModel)

# The same address and title rules as the documents these tools write (notice plans, notes),
# so arguments that pass here cannot fail when the tool commits its document.
EmailAddress = Annotated[documents.Email, WithJsonSchema({"type": "string", "format": "email"})]
Title = Annotated[documents.ShortText, Field(description="Document title.")]


class ToolArgs(BaseModel):
    """Base of every argument model: frozen, whitespace-trimmed, unknown fields rejected."""

    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=True)


class CalculatorArgs(ToolArgs):
    expression: Annotated[
        str,
        Field(min_length=1, max_length=calculator.MAX_EXPRESSION_LENGTH, examples=["(2 + 3) * 4"]),
    ]


class ReadDocumentArgs(ToolArgs):
    title: Title


class WriteDocumentArgs(ToolArgs):
    title: Title
    text: Annotated[str, Field(max_length=32_000)]  # as documents.Note


class DeleteDocumentArgs(ToolArgs):
    title: Title


class AppendLedgerArgs(ToolArgs):
    text: Annotated[str, Field(min_length=1, max_length=2_000)]


class SendNoticesArgs(ToolArgs):
    recipients: Annotated[
        list[EmailAddress], Field(min_length=1, max_length=documents.MAX_RECIPIENTS)
    ]
    subject: documents.ShortText
    body: Annotated[str, Field(min_length=1, max_length=10_000)]
    policy: Literal["allSettled", "failFast"] = "allSettled"


class RegisterSkillArgs(ToolArgs):
    skill: Annotated[
        dict[str, Any],
        Field(description="The skill definition: name, inputs, steps (docs/skills.md)."),
    ]


def _workspace_path(value: str) -> str:
    return workspace.normalize_path(value)  # a PathProblem is a ValueError: pydantic reports it


WorkspacePath = Annotated[
    str,
    Field(min_length=1, max_length=workspace.MAX_PATH_CHARS, examples=["report.md"]),
    AfterValidator(_workspace_path),
]


class ListFilesArgs(ToolArgs):
    prefix: Annotated[str, Field(max_length=workspace.MAX_PATH_CHARS)] = ""


class ReadFileArgs(ToolArgs):
    path: WorkspacePath


class WriteFileArgs(ToolArgs):
    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=False)
    path: WorkspacePath
    text: Annotated[str, Field(max_length=256 * 1024)]


class EditFileArgs(ToolArgs):
    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=False)
    path: WorkspacePath
    old: Annotated[str, Field(min_length=1, max_length=64 * 1024)]
    new: Annotated[str, Field(max_length=64 * 1024)]


class DeleteFileArgs(ToolArgs):
    path: WorkspacePath


class RunPythonArgs(ToolArgs):
    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=False)
    code: Annotated[str, Field(min_length=1, max_length=20_000)]


# One workspace tool at a time per session: each rehydrates the session's directory and
# commits a snapshot made from it, so two at once on one host would see each other's files.
_ONE_WORKSPACE_TOOL: JsonObject = {"key": "workspace:{session}", "limit": 1, "lease_s": 300}


def _no_problems(args: BaseModel) -> list[str]:
    return []


def _expression_problems(args: CalculatorArgs) -> list[str]:
    error = calculator.check(args.expression)
    return [f"expression: {error.message}"] if error else []


# register_skill's argument is a whole skill, which kernel.skills.skill validates - its tool steps
# against this catalogue, so this module cannot import it without an import circle. Skills
# hands its validator over when it is imported (``use_skill_validator``); until then
# register_skill refuses every call (fail closed) rather than store an unchecked skill.
_skill_validator: list[Callable[[object], list[str]]] = []


def use_skill_validator(validate: Callable[[object], list[str]]) -> None:
    """Hand over how ``register_skill`` checks its ``skill`` argument: every problem as
    ``"skill.<path>: <what is wrong>"``, none for a valid skill (``kernel.skills.skill`` does)."""
    _skill_validator[:] = [validate]


def _skill_problems(args: RegisterSkillArgs) -> list[str]:
    if not _skill_validator:
        return [
            "skill: skills cannot be checked: kernel.skills.skill is not loaded in this process"
        ]
    return _skill_validator[0](args.skill)


def _recipient_problems(args: SendNoticesArgs) -> list[str]:
    # Case-insensitive, as mail systems (and the notice_plan document) compare addresses.
    counts = Counter(r.casefold() for r in args.recipients)
    return [f"recipients: duplicate address {r}" for r, n in counts.items() if n > 1]


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolSpec(Generic[ArgsT]):
    """One tool: its name, argument model, replay policy and approval requirement."""

    name: str
    args_model: type[ArgsT]
    policy: ToolPolicy
    requires_approval: bool = False
    description: str
    precheck: Callable[[ArgsT], list[str]] = _no_problems
    # A per-key limit on running the tool (``kernel/common/limits.py``), e.g.
    # ``{"key": "service:{service}", "limit": 1}``; its key is filled from the call's
    # arguments, ``tool`` and ``session``. None: the tool runs unlimited (no entity call).
    concurrency: JsonObject | None = None
    # Retries and the onFailure handler (``kernel/turn/failures.py``): a run that failed with a
    # ``tool_error`` (the tool raised) is tried again under the policy, and when every try
    # failed its handler runs once. None: one try, as for unsafe tools, whose failed run may
    # have had its effect.
    failure: FailurePolicy | None = None

    def to_openai(self) -> JsonObject:
        """The chat-completions ``tools`` entry, schema derived from the argument model."""
        schema: JsonObject = self.args_model.model_json_schema()
        schema.pop("title", None)  # the function name already says it
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": schema},
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolError:
    """Why a call cannot run; returned as a value so the model and the user can see it."""

    kind: Literal["unknown_tool", "invalid_arguments", "tool_not_allowed"]
    tool: str
    field: str | None
    message: str
    problems: tuple[tuple[str | None, str], ...] = ()

    def to_dict(self) -> JsonObject:
        problems: list[JsonValue] = [{"field": f, "message": m} for f, m in self.problems]
        return {
            "ok": False,
            "kind": self.kind,
            "tool": self.tool,
            "field": self.field,
            "message": self.message,
            "problems": problems,
        }


def _note_failure(kind: str) -> FailurePolicy:
    """The note tools read and write the session: a raised error is worth two more tries,
    then a person is told (``notify_operator``)."""
    return FailurePolicy(
        kind=kind, max_attempts=3, first_retry_s=2, backoff=2, on_failure="notify_operator"
    )


_CATALOGUE: tuple[ToolSpec[Any], ...] = (
    ToolSpec(
        name="calculator",
        args_model=CalculatorArgs,
        policy="safe",
        description="Evaluate an arithmetic expression: numbers, + - * / // % **, parentheses.",
        precheck=_expression_problems,
    ),
    ToolSpec(
        name="read_document",
        args_model=ReadDocumentArgs,
        policy="safe",
        description="Read the session document (note) with this title.",
        failure=_note_failure("read_document"),
    ),
    ToolSpec(
        name="write_document",
        args_model=WriteDocumentArgs,
        policy="safe",
        description="Create or replace the session document with this title.",
        failure=_note_failure("write_document"),
    ),
    ToolSpec(
        name="delete_document",
        args_model=DeleteDocumentArgs,
        policy="safe",
        requires_approval=True,
        description="Delete the session document with this title. A person approves it first.",
        failure=_note_failure("delete_document"),
    ),
    ToolSpec(
        name="append_ledger",
        args_model=AppendLedgerArgs,
        policy="unsafe",
        description="Append one line to the session ledger. Every call adds a line.",
        # The ledger is one file for the app: appends one at a time, in the order asked.
        concurrency={"key": "tool-ledger", "limit": 1, "lease_s": 120},
    ),
    ToolSpec(
        name="send_notices",
        args_model=SendNoticesArgs,
        policy="unsafe",
        description=(
            "Send one notice e-mail to each recipient (distinct addresses). allSettled sends to "
            "everyone and reports each outcome; failFast stops the rest at the first failure."
        ),
        precheck=_recipient_problems,
    ),
    ToolSpec(
        name="register_skill",
        args_model=RegisterSkillArgs,
        policy="safe",
        requires_approval=True,
        description=(
            "Register a skill: a named, versioned procedure of steps (tool calls, model calls, "
            "waits for events, approvals and timers, joins) that runs as its own durable task. "
            "A person approves it first."
        ),
        precheck=_skill_problems,
    ),
    ToolSpec(
        name="list_files",
        args_model=ListFilesArgs,
        policy="safe",
        description="List the files of the session workspace (optionally under a prefix).",
    ),
    ToolSpec(
        name="read_file",
        args_model=ReadFileArgs,
        policy="safe",
        description="Read one text file of the session workspace.",
    ),
    ToolSpec(
        name="write_file",
        args_model=WriteFileArgs,
        policy="safe",
        description="Create or replace a text file in the session workspace.",
        concurrency=_ONE_WORKSPACE_TOOL,
    ),
    ToolSpec(
        name="edit_file",
        args_model=EditFileArgs,
        policy="safe",
        description="Replace the one occurrence of the exact text `old` in a workspace file.",
        concurrency=_ONE_WORKSPACE_TOOL,
    ),
    ToolSpec(
        name="delete_file",
        args_model=DeleteFileArgs,
        policy="safe",
        description="Delete a file from the session workspace.",
        concurrency=_ONE_WORKSPACE_TOOL,
    ),
    ToolSpec(
        name="run_python",
        args_model=RunPythonArgs,
        policy="safe",
        description=(
            "Run a Python snippet in a subprocess whose working directory is the session "
            "workspace: no app settings, no network where the platform allows, limits on CPU, "
            "memory, file size, processes and wall time; its output is truncated. The files it "
            "leaves are kept only if it exits with status 0."
        ),
        concurrency=_ONE_WORKSPACE_TOOL,
    ),
)
TOOLS: dict[str, ToolSpec[Any]] = {spec.name: spec for spec in _CATALOGUE}
# A bad limit declaration stops the app at import, naming the tool and the field, instead
# of failing the first call that reaches it.
for _spec in _CATALOGUE:
    if _spec.concurrency is not None:
        parse_limit(_spec.concurrency, f"{_spec.name}.concurrency")


def resolve(name: str) -> ToolSpec[Any] | ToolError:
    """The spec for ``name``, or an ``unknown_tool`` error value listing the known tools."""
    spec = TOOLS.get(name)
    if spec is not None:
        return spec
    known = ", ".join(TOOLS)
    return ToolError(
        kind="unknown_tool",
        tool=name,
        field="name",
        message=f"unknown tool {name!r}; known tools: {known}",
    )


def validate_call(
    name: str, arguments: object, allowed: Collection[str] | None = None
) -> tuple[bool, JsonObject]:
    """Resolve, validate and precheck one call: ``(True, final_args)`` or ``(False, error)``.

    ``allowed``: the tools this run may call (None: the whole catalogue)."""
    spec = resolve(name)
    if isinstance(spec, ToolError):
        return False, spec.to_dict()
    if allowed is not None and name not in allowed:
        return False, ToolError(
            kind="tool_not_allowed",
            tool=name,
            field="name",
            message=f"{name} is not one of this run's tools: {', '.join(allowed) or 'none'}",
        ).to_dict()
    try:
        args = spec.args_model.model_validate(arguments)
    except ValidationError as exc:
        return False, _invalid(name, _schema_problems(exc)).to_dict()
    if problems := spec.precheck(args):
        return False, _invalid(name, [_split_problem(p) for p in problems]).to_dict()
    final_args: JsonObject = args.model_dump(mode="json")
    return True, final_args


def note_document_id(title: str) -> str:
    """The session document the note tools use for ``title``: one per title, case-insensitive.

    A readable slug plus a hash of the whole title, so different titles never share a document
    and the id always matches the document id pattern, whatever characters the title has.
    """
    key = title.strip().casefold()
    slug = re.sub(r"[^a-z0-9]+", "-", key).strip("-")[:40] or "note"
    return f"note.{slug}.{uuid.uuid5(ids.NAMESPACE, 'note:' + key).hex[:12]}"


def openai_tool_specs(allowed: Collection[str] | None = None) -> list[JsonObject]:
    """Every tool (or every ``allowed`` one) as a chat-completions ``tools`` entry, in
    catalogue order."""
    return [spec.to_openai() for spec in _CATALOGUE if allowed is None or spec.name in allowed]


def _invalid(tool: str, problems: list[tuple[str | None, str]]) -> ToolError:
    field, _ = problems[0]
    message = "; ".join(f"{f}: {m}" if f else m for f, m in problems)
    return ToolError(
        kind="invalid_arguments",
        tool=tool,
        field=field,
        message=f"invalid arguments for {tool}: {message}",
        problems=tuple(problems),
    )


def _schema_problems(exc: ValidationError) -> list[tuple[str | None, str]]:
    # An empty location means the arguments as a whole (e.g. a list instead of an object).
    return [
        (
            join_path(None, *error["loc"]) or "arguments",
            error["msg"].removeprefix("Value error, "),  # pydantic's prefix for our ValueErrors
        )
        for error in exc.errors(include_url=False)
    ]


def _split_problem(problem: str) -> tuple[str | None, str]:
    field, sep, message = problem.partition(": ")
    return (field, message) if sep else (None, problem)
