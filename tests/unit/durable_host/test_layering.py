"""The import rules of the repository, checked on the source with ``ast``.

* The host never imports the app, and the app never imports the host; both may import the
  ``SHARED`` packages, which import neither.
* The host's pure cores do no IO and know nothing of the shell: neither they nor anything
  they import at run time reaches ``durable_host.store``, ``durable_host.http``, asyncio,
  sqlite3, aiohttp or the Azure SDKs.
* The stores (``durable_host/store/**``) import no core: of the host only the neutral
  ``records``, ``faults``, ``history`` (timestamps), ``azurite``, ``logs``, the ownership
  core and its shell (``ownership``, ``membership``), the pure ``versioning`` rules and each
  other.
* ``records`` imports nothing of the host.
* ``keys`` (the host's keys) reaches neither HTTP nor a store implementation: it sees the
  store only as the two secret methods of the port, so HTTP and the CLI share it.
* ``kernel`` does no IO.
* Telemetry lives in the shell: no core reaches ``opentelemetry``, and of the app only
  activities, the API and adapters do - never orchestrators, which replay, nor entities.
* Every room is small: each Python file of the repository (host, app, tests, bench,
  examples, scripts) has fewer than ``MAX_LINES`` lines.
* The house has no import circles: no module of the repository reaches itself through the
  run-time imports of the repository's own modules - deferred imports inside a function
  count (they are a dependency all the same, only a later one); imports under
  ``TYPE_CHECKING`` do not (they never run).
"""

from __future__ import annotations

import ast
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
HOST = "durable_host"
APP_PACKAGES = ("kernel", "orchestrators", "activities", "entities", "api", "adapters")
APP = (*APP_PACKAGES, "function_app")
SHARED = ("functions_connections", "functions_schedules")  # imported by the host and the app alike
CORES = ("orchestration", "entity", "history", "shim", "replay", "wire", "rewind", "records")
CORE_FORBIDDEN = (
    "durable_host.store",
    "durable_host.http",
    "asyncio",
    "sqlite3",
    "aiohttp",
    "azure",
    "opentelemetry",
)
REPLAYED = ("orchestrators", "entities", "kernel")  # code that must never emit a span
STORE_MAY_IMPORT = (
    "durable_host.core.records",
    "durable_host.ops.faults",
    "durable_host.core.history",
    "durable_host.ops.azurite",
    "durable_host.ops.logs",
    "durable_host.cluster.ownership",
    "durable_host.cluster.membership",
    "durable_host.core.versioning",  # pure: which version may run an instance (partition handover)
    "durable_host.store",
)
KERNEL_FORBIDDEN = (
    "azure",
    "aiohttp",
    "openai",
    "adapters",
    "activities",
    "sqlite3",
    "socket",
    "durable_host",
)


MAX_LINES = 700  # a room a reader takes in at once; split along its concepts past this
SKIPPED_DIRS = ("node_modules", "build", "__pycache__")  # and every hidden one: .venv*, .git


def _module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _sources(*roots: str) -> Iterator[Path]:
    for root in roots:
        path = ROOT / root
        if path.suffix == ".py" or path.with_suffix(".py").is_file():
            yield path if path.suffix == ".py" else path.with_suffix(".py")
        elif path.is_dir():
            yield from sorted(p for p in path.rglob("*.py") if "node_modules" not in p.parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(path: Path, *, runtime_only: bool = False, root: Path = ROOT) -> set[str]:
    """Every dotted name ``path`` imports (``from a import b`` gives ``a`` and ``a.b``)."""
    tree = ast.parse(path.read_text(), str(path))
    package = _module_name(path, root).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and runtime_only and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names if alias.name != "*")
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def _reaches(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _host_modules() -> dict[str, Path]:
    return {_module_name(p): p for p in _sources(HOST)}


def _host_dependencies(name: str, modules: dict[str, Path]) -> set[str]:
    """The host modules ``name`` imports at run time."""
    deps: set[str] = set()
    for imported in _imports(modules[name], runtime_only=True):
        while imported and imported not in modules:
            imported = imported.rpartition(".")[0]
        if imported.startswith(HOST + ".") and imported != name:
            deps.add(imported)
    return deps


def _closure(name: str, modules: dict[str, Path]) -> set[str]:
    seen, todo = {name}, [name]
    while todo:
        for dep in _host_dependencies(todo.pop(), modules):
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


def test_the_import_scan_sees_absolute_relative_and_conditional_imports() -> None:
    modules = _host_modules()

    engine = _imports(modules["durable_host.engine.loops"])
    closure = _closure("durable_host.core.orchestration", modules)
    runtime = _imports(modules["durable_host.core.orchestration"], runtime_only=True)

    assert "durable_host.store.base" in engine and "asyncio" in engine
    assert {
        "durable_host.core.shim",
        "durable_host.core.records",
        "durable_host.core.wire",
    } <= closure
    assert "durable_host.core.sessions" in _imports(modules["durable_host.core.orchestration"])
    assert "durable_host.core.sessions" not in runtime


def test_the_host_never_imports_the_app() -> None:
    violations = [
        f"{name} imports {imported}"
        for name, path in _host_modules().items()
        for imported in _imports(path)
        if imported.split(".")[0] in APP
    ]

    assert violations == []


def test_the_app_never_imports_the_host() -> None:
    violations = [
        f"{_module_name(path)} imports {imported}"
        for path in _sources(*APP)
        for imported in _imports(path)
        if _reaches(imported, (HOST,))
    ]

    assert violations == []


@pytest.mark.parametrize("shared", SHARED)
def test_a_shared_package_imports_neither_the_host_nor_the_app(shared: str) -> None:
    sources = list(_sources(shared))
    violations = [
        f"{_module_name(path)} imports {imported}"
        for path in sources
        for imported in _imports(path)
        if _reaches(imported, (HOST, *APP))
    ]

    assert sources
    assert violations == []


@pytest.mark.parametrize("core", CORES)
def test_a_core_reaches_no_io_and_no_shell(core: str) -> None:
    modules = _host_modules()

    closure = _closure(f"{HOST}.{core}", modules)
    direct = _imports(modules[f"{HOST}.{core}"])

    outside = sorted(m for m in closure if m.removeprefix(HOST + ".") not in CORES)
    io = sorted(
        f"{m} imports {i}"
        for m in closure
        for i in _imports(modules[m], runtime_only=True)
        if _reaches(i, CORE_FORBIDDEN)
    )
    assert outside == []
    assert io == []
    assert [i for i in direct if _reaches(i, CORE_FORBIDDEN)] == []


def test_the_stores_import_no_core() -> None:
    store_modules = {n: p for n, p in _host_modules().items() if _reaches(n, (f"{HOST}.store",))}

    violations = [
        f"{name} imports {imported}"
        for name, path in store_modules.items()
        for imported in _imports(path)
        if _reaches(imported, (HOST,))
        and imported != HOST
        and not _reaches(imported, STORE_MAY_IMPORT)
    ]

    assert "durable_host.store.sqlite.store" in store_modules
    assert violations == []


def test_records_import_nothing_of_the_host() -> None:
    path = _host_modules()[f"{HOST}.records"]

    assert [i for i in _imports(path) if _reaches(i, (HOST,))] == []


def test_the_kernel_does_no_io() -> None:
    violations = [
        f"{_module_name(path)} imports {imported}"
        for path in _sources("kernel")
        for imported in _imports(path)
        if _reaches(imported, KERNEL_FORBIDDEN)
    ]

    assert violations == []


def test_the_keys_reach_no_http_and_no_store() -> None:
    modules = _host_modules()

    closure = _closure(f"{HOST}.keys", modules)

    assert closure == {f"{HOST}.keys"}
    assert [
        i for i in _imports(modules[f"{HOST}.keys"]) if _reaches(i, ("aiohttp", "azure", "sqlite3"))
    ] == []


def test_spans_are_never_made_by_replayed_code() -> None:
    violations = [
        f"{_module_name(path)} imports {imported}"
        for path in _sources(*REPLAYED)
        for imported in _imports(path)
        if _reaches(imported, ("opentelemetry", "adapters.telemetry"))
    ]

    assert violations == []


def _python_files(root: Path) -> list[Path]:
    """The repository's Python files: tracked or new (not ignored) ones when ``root`` is a
    git checkout, else every one outside hidden folders, ``node_modules`` and ``build``."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z", "*.py"],
            cwd=root,
            capture_output=True,
            check=True,
            timeout=60,
        ).stdout.decode()
    except (OSError, subprocess.SubprocessError):
        listed = ""
    files = [root / name for name in listed.split("\0") if name]
    if files:
        return sorted(p for p in files if p.is_file())
    return sorted(
        p
        for p in root.rglob("*.py")
        if not any(
            part.startswith(".") or part in SKIPPED_DIRS or part.endswith(".egg-info")
            for part in p.relative_to(root).parts[:-1]
        )
    )


def _oversized(root: Path) -> list[str]:
    found = []
    for path in _python_files(root):
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines >= MAX_LINES:
            found.append(
                f"{path.relative_to(root)}: {lines} lines (a room has fewer than {MAX_LINES})"
            )
    return found


def _import_graph(root: Path) -> dict[str, set[str]]:
    """Each module of ``root`` and the modules of ``root`` it imports at run time.

    ``from pkg import mod`` is an edge to ``pkg.mod`` when that is a module, else to
    ``pkg``; an imported name outside the repository is no edge."""
    modules = {_module_name(p, root): p for p in _python_files(root)}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges: set[str] = set()
        imported = _imports(path, runtime_only=True, root=root)
        for dotted in imported:
            if dotted in modules:
                if not any(o in modules and o.startswith(dotted + ".") for o in imported):
                    edges.add(dotted)  # not only the ``pkg`` of ``from pkg import mod``
                continue
            # a name a module defines (``from a.b import f``): the module that holds it
            holder = dotted.rpartition(".")[0]
            while holder and holder not in modules:
                holder = holder.rpartition(".")[0]
            if holder:
                edges.add(holder)
        graph[name] = edges - {name}
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(groups)


def test_every_room_has_fewer_than_max_lines() -> None:
    files = _python_files(ROOT)

    assert len(files) > 100  # the scan sees the repository, not an empty folder
    assert {"durable_host/engine/loops.py", "tests/unit/durable_host/test_layering.py"} <= {
        str(p.relative_to(ROOT)) for p in files
    }
    assert _oversized(ROOT) == []


def test_the_house_has_no_import_circles() -> None:
    graph = _import_graph(ROOT)

    assert (
        "durable_host.engine.episodes" in graph["durable_host.engine.loops"]
    )  # the scan sees edges
    assert "kernel.turn.tools" in graph["kernel.skills.skill"]
    assert _circles(graph) == []


def test_the_room_and_circle_rules_fail_on_a_house_that_breaks_them(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from pkg import a\n")  # a package's own: no circle
    (pkg / "a.py").write_text("from pkg import b\n")
    (pkg / "b.py").write_text("def f():\n    from pkg.c import g\n")  # deferred: counts
    (pkg / "c.py").write_text("import pkg.a\n\ndef g(): ...\n")
    (pkg / "d.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.e\n"
    )
    (pkg / "e.py").write_text("import pkg.d\n" + "x = 1\n" * MAX_LINES)
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / "big.py").write_text("x = 1\n" * MAX_LINES)  # not the house's

    assert _circles(_import_graph(tmp_path)) == [["pkg.a", "pkg.b", "pkg.c"]]
    assert _oversized(tmp_path) == [
        f"pkg/e.py: {MAX_LINES + 1} lines (a room has fewer than {MAX_LINES})"
    ]
