"""The import rules of the repository, checked on the source with ``ast``.

* The host's packages are layers (``HOST_LAYERS``, listed in ``durable_host/__init__.py``):
  a module imports at run time only modules of its own package or of a lower layer, never a
  higher one, a sibling of the same rank, or the top-level composition (``host``, ``server``,
  ``cli``, ``testing``, ``pytest_plugin``). The kernel's packages likewise (``KERNEL_LAYERS``).
* The host never imports the app, and the app never imports the host; both may import the
  ``SHARED`` packages, which import neither.
* The pure core (``durable_host/core``) does no IO and knows nothing of the shell: no module
  of it imports at run time a module outside it, asyncio, sqlite3, aiohttp, OpenTelemetry or
  the Azure storage and identity SDKs (the Functions SDKs it drives are allowed).
* The stores (``durable_host/store/**``) import no replay core: of the host only the neutral
  ``records``, ``history`` (timestamps) and ``versioning`` rules of the core, ``ops``, the
  cluster (``ownership``, ``membership``), the host's settings (``functions.config``, for the
  factory) and each other.
* ``records`` imports nothing of the host.
* ``keys`` (the host's keys) reaches neither HTTP nor a store implementation: it sees the
  store only as the two secret methods of the port, so HTTP and the CLI share it.
* ``kernel`` does no IO.
* Telemetry lives in the shell: no core reaches ``opentelemetry``, and of the app only
  activities, the API and adapters do - never orchestrators, which replay, nor entities.
* Every room is small: each Python file of the repository (host, app, tests, bench,
  examples, scripts) has fewer than ``MAX_LINES`` lines.
* No package of the host, the kernel or the app holds more than ``MAX_MODULES`` modules
  directly: past that its layers are no longer seen in a listing.
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
CORE = f"{HOST}.core"
HOST_LAYERS = {  # package -> rank: a module may import its own package and lower ranks only
    "core": 0,
    "ops": 1,
    "cluster": 2,
    "functions": 3,
    "store": 4,
    "engine": 5,
    "http": 6,
    "triggers": 7,
    "dashboard": 8,
    "transfer": 8,
}
KERNEL_LAYERS = {"common": 0, "workspace": 1, "session": 2, "turn": 3, "skills": 4, "loops": 4}
CORE_FORBIDDEN = (
    "durable_host.store",
    "durable_host.http",
    "asyncio",
    "sqlite3",
    "aiohttp",
    "azure.core",
    "azure.data",
    "azure.identity",
    "azure.storage",
    "opentelemetry",
)
REPLAYED = ("orchestrators", "entities", "kernel")  # code that must never emit a span
STORE_MAY_IMPORT = (
    "durable_host.core.records",
    "durable_host.core.history",
    "durable_host.core.versioning",  # pure: which version may run an instance (partition handover)
    "durable_host.ops",
    "durable_host.cluster",
    "durable_host.functions.config",  # the factory builds a store from the host's settings
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
MAX_MODULES = 20  # modules side by side in one package before its layers are no longer seen
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


def _core_modules() -> list[str]:
    return sorted(n for n in _host_modules() if _reaches(n, (CORE,)))


@pytest.mark.parametrize("core", _core_modules())
def test_the_core_reaches_no_io_and_no_shell(core: str) -> None:
    modules = _host_modules()

    closure = _closure(core, modules)
    direct = _imports(modules[core])

    outside = sorted(m for m in closure if not _reaches(m, (CORE,)))
    io = sorted(
        f"{m} imports {i}"
        for m in closure
        for i in _imports(modules[m], runtime_only=True)
        if _reaches(i, CORE_FORBIDDEN)
    )
    assert outside == []
    assert io == []
    assert [i for i in direct if _reaches(i, CORE_FORBIDDEN)] == []


def _layer_violations(root: Path, top: str, layers: dict[str, int]) -> list[str]:
    """Each run-time import of a module of ``top/`` that breaks the layers: a module of a
    package in ``layers`` imports one of a higher rank, of a sibling of its own rank, of a
    package not in ``layers``, or a top-level module of ``top`` (the composition)."""
    graph = _import_graph(root)

    def place(name: str) -> str | None:  # the layer package, or None for top-level modules
        parts = name.split(".")
        return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in layers) else None

    found = []
    for name, edges in sorted(graph.items()):
        if not _reaches(name, (top,)) or name == top or place(name) not in layers:
            continue
        own = place(name)
        for dep in sorted(edges):
            if not _reaches(dep, (top,)) or dep == top:
                continue
            theirs = place(dep)
            if theirs == own:
                continue
            if theirs is None or theirs not in layers:
                found.append(f"{name} imports {dep}: the composition above every layer")
            elif layers[theirs] >= layers[own]:  # type: ignore[index]
                found.append(f"{name} imports {dep}: {theirs} is not below {own}")
    return found


def test_the_host_packages_import_only_lower_layers() -> None:
    packages = {p.name for p in (ROOT / HOST).iterdir() if (p / "__init__.py").is_file()}

    assert packages == set(HOST_LAYERS)  # a new package takes its place in the layers
    assert _layer_violations(ROOT, HOST, HOST_LAYERS) == []


def test_the_kernel_packages_import_only_lower_layers() -> None:
    packages = {p.name for p in (ROOT / "kernel").iterdir() if (p / "__init__.py").is_file()}
    loose = [p.name for p in (ROOT / "kernel").glob("*.py") if p.name != "__init__.py"]

    assert packages == set(KERNEL_LAYERS)
    assert loose == []  # every kernel module belongs to a layer
    assert _layer_violations(ROOT, "kernel", KERNEL_LAYERS) == []


def test_every_package_states_its_contract() -> None:
    inits = [*(ROOT / HOST).rglob("__init__.py"), *(ROOT / "kernel").rglob("__init__.py")]
    silent = [
        str(p.relative_to(ROOT))
        for p in inits
        if "static" not in p.parts and not ast.get_docstring(ast.parse(p.read_text()))
    ]

    assert len(inits) > 15
    assert silent == []


def test_the_layer_rule_fails_on_a_house_that_breaks_it(tmp_path: Path) -> None:
    for package in ("low", "mid", "side", "high"):
        (tmp_path / "pkg" / package).mkdir(parents=True)
        (tmp_path / "pkg" / package / "__init__.py").write_text("")
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "top.py").write_text("import pkg.high.h\n")  # the composition: fine
    (tmp_path / "pkg" / "low" / "l.py").write_text("def f():\n    from pkg.mid import m\n")
    (tmp_path / "pkg" / "mid" / "m.py").write_text("from pkg.low import l\nimport pkg.side.s\n")
    (tmp_path / "pkg" / "side" / "s.py").write_text("from pkg.low.l import f\n")
    (tmp_path / "pkg" / "high" / "h.py").write_text(
        "from pkg.mid import m\nfrom pkg import top\nfrom typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    import pkg.high.h\n"
    )
    layers = {"low": 0, "mid": 1, "side": 1, "high": 2}

    assert _layer_violations(tmp_path, "pkg", layers) == [
        "pkg.high.h imports pkg.top: the composition above every layer",
        "pkg.low.l imports pkg.mid.m: mid is not below low",
        "pkg.mid.m imports pkg.side.s: side is not below mid",
    ]


def test_the_stores_import_no_core() -> None:
    modules = _host_modules()
    store_modules = {n: p for n, p in modules.items() if _reaches(n, (f"{HOST}.store",))}
    packages = {n for n, p in modules.items() if p.name == "__init__.py"}  # ``from pkg import``

    violations = [
        f"{name} imports {imported}"
        for name, path in store_modules.items()
        for imported in _imports(path)
        if _reaches(imported, (HOST,))
        and imported not in packages
        and not _reaches(imported, STORE_MAY_IMPORT)
    ]

    assert "durable_host.store.sqlite.store" in store_modules
    assert violations == []


def test_records_import_nothing_of_the_host() -> None:
    path = _host_modules()[f"{CORE}.records"]

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

    closure = _closure(f"{HOST}.http.keys", modules)

    assert closure == {f"{HOST}.http.keys"}
    assert [
        i
        for i in _imports(modules[f"{HOST}.http.keys"])
        if _reaches(i, ("aiohttp", "azure", "sqlite3"))
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


def _crowded(root: Path, packages: tuple[str, ...]) -> list[str]:
    found = []
    for package in packages:
        for folder in [root / package, *(root / package).rglob("*")]:
            if folder.is_dir() and (folder / "__init__.py").is_file():
                count = len([p for p in folder.glob("*.py") if p.name != "__init__.py"])
                if count > MAX_MODULES:
                    found.append(f"{folder.relative_to(root)}: {count} modules")
    return found


def test_no_package_holds_more_than_max_modules() -> None:
    assert _crowded(ROOT, (HOST, *APP_PACKAGES)) == []


def test_the_package_size_rule_fails_on_a_crowded_package(tmp_path: Path) -> None:
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    for folder in (tmp_path / "pkg", tmp_path / "pkg" / "sub"):
        (folder / "__init__.py").write_text("")
    for i in range(MAX_MODULES + 1):
        (tmp_path / "pkg" / "sub" / f"m{i}.py").write_text("")

    assert _crowded(tmp_path, ("pkg",)) == [f"pkg/sub: {MAX_MODULES + 1} modules"]


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
