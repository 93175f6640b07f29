"""The app's MCP tools, resources and prompts as the extension lists them (pure).

``Catalog.build`` reads the trigger bindings the Python library writes - ``mcpToolTrigger``
(from ``mcp_tool``, ``mcp_tool_trigger`` or ``generic_trigger``), ``mcpResourceTrigger`` and
``mcpPromptTrigger`` - and makes the wire shapes of ``tools/list``, ``resources/list``,
``resources/templates/list`` and ``prompts/list``, as the extension's registries do:

* a tool's input schema is built from ``toolProperties`` (``propertyName``,
  ``propertyType``, ``description``, ``isRequired``, ``isArray``, ``enumValues``), or is the
  binding's ``inputSchema`` when ``useWorkerInputSchema`` is set; ``outputSchema`` and the
  ``metadata`` JSON object (listed as ``_meta``) go out as declared;
* a resource whose URI holds ``{name}`` expressions is a template, matched by a pattern in
  which each expression stands for one path segment (or one query value after ``?``/``&``);
* names are matched case-insensitively, and a duplicate name or URI is an error of the app.

``CatalogError`` names the function whose declaration cannot be served (the host refuses to
start, as the extension fails to index such a function).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from durable_host.functions.loader import FunctionInfo

TOOL, RESOURCE, PROMPT = "mcpToolTrigger", "mcpResourceTrigger", "mcpPromptTrigger"
KINDS = (TOOL, RESOURCE, PROMPT)
_EXPRESSION = re.compile(r"\{[^{}]+\}")


class CatalogError(Exception):
    """An MCP declaration the host cannot serve (named in the message)."""


@dataclass(frozen=True, slots=True)
class Tool:
    info: FunctionInfo
    name: str
    description: str | None
    input_schema: dict[str, Any]
    required: tuple[str, ...]
    output_schema: dict[str, Any] | None
    meta: dict[str, Any] | None
    use_result_schema: bool

    def wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "inputSchema": self.input_schema}
        if self.description is not None:
            out["description"] = self.description
        if self.output_schema is not None:
            out["outputSchema"] = self.output_schema
        if self.meta:
            out["_meta"] = self.meta
        return out


@dataclass(frozen=True, slots=True)
class Resource:
    info: FunctionInfo
    uri: str
    name: str
    title: str | None
    description: str | None
    mime_type: str | None
    size: int | None
    meta: dict[str, Any] | None
    pattern: re.Pattern[str] | None  # set for a template

    def wire(self) -> dict[str, Any]:
        key = "uriTemplate" if self.pattern is not None else "uri"
        out: dict[str, Any] = {key: self.uri, "name": self.name}
        for wire_name, value in (
            ("title", self.title),
            ("description", self.description),
            ("mimeType", self.mime_type),
            ("size", None if self.pattern is not None else self.size),
            ("_meta", self.meta or None),
        ):
            if value is not None:
                out[wire_name] = value
        return out


@dataclass(frozen=True, slots=True)
class Prompt:
    info: FunctionInfo
    name: str
    title: str | None
    description: str | None
    arguments: tuple[dict[str, Any], ...] | None
    icons: list[Any] | None
    meta: dict[str, Any] | None
    use_result_schema: bool

    def wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name}
        for wire_name, value in (
            ("title", self.title),
            ("description", self.description),
            ("arguments", list(self.arguments) if self.arguments is not None else None),
            ("icons", self.icons),
            ("_meta", self.meta or None),
        ):
            if value is not None:
                out[wire_name] = value
        return out

    def required(self) -> list[str]:
        return [str(a.get("name")) for a in self.arguments or () if a.get("required") is True]


@dataclass(slots=True)
class Catalog:
    tools: dict[str, Tool] = field(default_factory=dict)  # lower-cased name -> tool
    resources: dict[str, Resource] = field(default_factory=dict)  # lower-cased URI -> resource
    templates: list[Resource] = field(default_factory=list)
    prompts: dict[str, Prompt] = field(default_factory=dict)

    @classmethod
    def build(cls, functions: list[FunctionInfo]) -> Catalog:
        catalog = cls()
        for info in functions:
            if info.disabled:
                continue  # a disabled function does not exist, as on the Functions host
            kind = str(info.trigger().get("type"))
            try:
                if kind == TOOL:
                    catalog._add_tool(info)
                elif kind == RESOURCE:
                    catalog._add_resource(info)
                elif kind == PROMPT:
                    catalog._add_prompt(info)
            except (ValueError, TypeError, KeyError, AttributeError) as exc:
                raise CatalogError(f"function '{info.name}': {kind}: {exc}") from exc
        return catalog

    def empty(self) -> bool:
        return not (self.tools or self.resources or self.templates or self.prompts)

    def tool(self, name: str) -> Tool | None:
        return self.tools.get(name.lower())

    def prompt(self, name: str) -> Prompt | None:
        return self.prompts.get(name.lower())

    def resource(self, uri: str) -> Resource | None:
        found = self.resources.get(uri.lower())
        if found is not None:
            return found
        return next((t for t in self.templates if t.pattern and t.pattern.match(uri)), None)

    def _add_tool(self, info: FunctionInfo) -> None:
        b = info.trigger()
        name = str(b.get("toolName") or info.name)
        if name.lower() in self.tools:
            raise ValueError(f"a tool named '{name}' is already declared")
        if _flag(b.get("useWorkerInputSchema")) and b.get("inputSchema"):
            schema = _json_object(b["inputSchema"], "inputSchema")
            required = tuple(str(r) for r in schema.get("required") or ())
        else:
            schema, required = input_schema(_json_list(b.get("toolProperties"), "toolProperties"))
        output = _json_object(b["outputSchema"], "outputSchema") if b.get("outputSchema") else None
        self.tools[name.lower()] = Tool(
            info,
            name,
            b.get("description"),
            schema,
            required,
            output,
            _metadata(b.get("metadata")),
            _flag(b.get("useResultSchema")),
        )

    def _add_resource(self, info: FunctionInfo) -> None:
        b = info.trigger()
        uri = str(b.get("uri") or "")
        pattern = template_pattern(uri) if _EXPRESSION.search(uri) else None
        if pattern is None and ("{" in uri or "}" in uri):
            raise ValueError(f"the URI '{uri}' has unmatched or empty braces")
        if not re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", uri):
            raise ValueError(f"the URI '{uri}' is not absolute")
        size = b.get("size")
        resource = Resource(
            info,
            uri,
            str(b.get("resourceName") or info.name),
            b.get("title"),
            b.get("description"),
            b.get("mimeType"),
            int(size) if size is not None else None,
            _metadata(b.get("metadata")),
            pattern,
        )
        if pattern is not None:
            shape = _EXPRESSION.sub("{_}", uri).lower()
            if any(_EXPRESSION.sub("{_}", t.uri).lower() == shape for t in self.templates):
                raise ValueError(f"a resource template like '{uri}' is already declared")
            self.templates.append(resource)
        elif uri.lower() in self.resources:
            raise ValueError(f"a resource with URI '{uri}' is already declared")
        else:
            self.resources[uri.lower()] = resource

    def _add_prompt(self, info: FunctionInfo) -> None:
        b = info.trigger()
        name = str(b.get("promptName") or info.name)
        if name.lower() in self.prompts:
            raise ValueError(f"a prompt named '{name}' is already declared")
        arguments = b.get("promptArguments")
        parsed = _json_list(arguments, "promptArguments") if arguments else None
        icons = _json_list(b.get("icons"), "icons") if b.get("icons") else None
        self.prompts[name.lower()] = Prompt(
            info,
            name,
            b.get("title"),
            b.get("description"),
            tuple({k: v for k, v in a.items() if v is not None} for a in parsed)
            if parsed is not None
            else None,
            icons,
            _metadata(b.get("metadata")),
            _flag(b.get("useResultSchema")),
        )


def input_schema(properties: list[dict[str, Any]]) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The JSON schema the extension builds from tool properties, and the required names.
    Property keys are read case-insensitively, as the extension's deserializer reads them."""
    props: dict[str, Any] = {}
    required: list[str] = []
    for raw in properties:
        p = {str(k).lower(): v for k, v in raw.items()}
        name = str(p.get("propertyname") or "").strip()
        if not name:
            continue
        kind: dict[str, Any] = {"type": str(p.get("propertytype") or "string")}
        if p.get("enumvalues"):
            kind["enum"] = [str(v) for v in p["enumvalues"]]
        entry = {"type": "array", "items": kind} if _flag(p.get("isarray")) else dict(kind)
        entry["description"] = p.get("description") or ""
        props[name] = entry
        if _flag(p.get("isrequired")) and name not in required:
            required.append(name)
    return {"type": "object", "properties": props, "required": required}, tuple(required)


def template_pattern(uri: str) -> re.Pattern[str]:
    """The matcher of a resource template: each ``{name}`` one segment, literals as given."""
    out, last = "", 0
    names: set[str] = set()
    for match in _EXPRESSION.finditer(uri):
        if match.start() == last and last > 0:
            raise ValueError("template expressions must be separated by a literal character")
        name = match.group()[1:-1]
        safe = re.sub(r"[^A-Za-z0-9_]", "_", name)
        if not name.strip() or any(c in name for c in "/#?& ") or safe.lower() in names:
            raise ValueError(f"the template parameter '{name}' is empty, repeated or malformed")
        names.add(safe.lower())
        out += re.escape(uri[last : match.start()])
        before = uri[match.start() - 1] if match.start() else ""
        out += f"(?P<{safe}>[^&#]+)" if before in ("?", "&") else f"(?P<{safe}>[^/?#]+)"
        last = match.end()
    out += re.escape(uri[last:])
    return re.compile(f"^{out}$", re.IGNORECASE)


def _flag(value: Any) -> bool:
    return value is True or (isinstance(value, str) and value.strip().lower() == "true")


def _json_list(text: Any, what: str) -> list[dict[str, Any]]:
    if text is None or text == "":
        return []
    value = json.loads(text) if isinstance(text, str) else text
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise ValueError(f"{what} must be a JSON array of objects")
    return value


def _json_object(text: Any, what: str) -> dict[str, Any]:
    value = json.loads(text) if isinstance(text, str) else text
    if not isinstance(value, dict):
        raise TypeError(f"{what} must be a JSON object")
    return value


def _metadata(text: Any) -> dict[str, Any] | None:
    """The ``metadata`` JSON object, listed as ``_meta`` (the extension refuses a non-object)."""
    if text is None or (isinstance(text, str) and not text.strip()):
        return None
    return _json_object(text, "metadata") or None
