"""The import rules of the repository, checked on the source with ``ast``.

* The host never imports the app, and the app never imports the host; both may import the
  ``SHARED`` packages, which import neither.
* The host's pure cores do no IO and know nothing of the shell: neither they nor anything
  they import at run time reaches ``durable_host.store``, ``durable_host.http``, asyncio,
  sqlite3, aiohttp or the Azure SDKs.
* The stores (``durable_host/store/**``) import no core: of the host only the neutral
  ``records``, ``faults``, ``history`` (timestamps), ``azurite``, ``logs`` and each other.
* ``records`` imports nothing of the host.
* ``keys`` (the host's keys) reaches neither HTTP nor a store implementation: it sees the
  store only as the two secret methods of the port, so HTTP and the CLI share it.
* ``kernel`` does no IO.
* Telemetry lives in the shell: no core reaches ``opentelemetry``, and of the app only
  activities, the API and adapters do - never orchestrators, which replay, nor entities.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
HOST = "durable_host"
APP_PACKAGES = ("kernel", "orchestrators", "activities", "entities", "api", "adapters")
APP = (*APP_PACKAGES, "function_app")
SHARED = ("functions_connections",)  # imported by the host and the app alike
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
    "durable_host.records",
    "durable_host.faults",
    "durable_host.history",
    "durable_host.azurite",
    "durable_host.logs",
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


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
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


def _imports(path: Path, *, runtime_only: bool = False) -> set[str]:
    """Every dotted name ``path`` imports (``from a import b`` gives ``a`` and ``a.b``)."""
    tree = ast.parse(path.read_text(), str(path))
    package = _module_name(path).split(".")
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

    engine = _imports(modules["durable_host.engine"])
    closure = _closure("durable_host.orchestration", modules)
    runtime = _imports(modules["durable_host.orchestration"], runtime_only=True)

    assert "durable_host.store.base" in engine and "asyncio" in engine
    assert {"durable_host.shim", "durable_host.records", "durable_host.wire"} <= closure
    assert "durable_host.sessions" in _imports(modules["durable_host.orchestration"])
    assert "durable_host.sessions" not in runtime


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

    assert "durable_host.store.sqlite" in store_modules
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
