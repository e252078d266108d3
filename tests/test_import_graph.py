"""The import graph of lakeward.core and lakeward.services keeps the layering of ARCHITECTURE.md.

The graph is read from the source (ast), not from an interpreter: every `import` and `from ...
import` of a lakeward module, at module level, under `if TYPE_CHECKING:` and inside functions.
Checked: core never imports services; no import cycle between modules at module level; every
import points down the layers below (or stays in its own layer); and no function-level import of a
lakeward module (they hid cycles) except the few listed, each with its reason.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: Source folder -> the package it is installed as.
PACKAGES = {"core": "lakeward.core", "services": "lakeward.services"}

#: ARCHITECTURE.md's layers of core, bottom first, by the first name under `lakeward.core` (package or
#: module). A module may import modules of its own layer and of the layers below, never above.
#: `lakeward.core` itself (the lazy facade) sits on top; services above all of core.
CORE_LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"exceptions", "schema", "table_version", "storage", "engine", "lazy"}),
    frozenset({"timeline", "file_group", "instant_clock"}),
    frozenset({"config", "keygen", "timestamp_keygen", "merge", "locks", "index", "cdc", "table_schema"}),
    frozenset({"context"}),
    frozenset({"read", "write", "table_services", "metadata_table", "orphans"}),
    frozenset({"table"}),
    frozenset({"spark", "health"}),
)

#: Imports that still point up the layers, by (importing module prefix, imported module prefix), each
#: with the move of issue 22 that removes it. An entry that no longer matches an import fails the
#: test too: delete it when its import goes.
UPWARD_IMPORTS: Mapping[tuple[str, str], str] = {
    # format-level helpers that live one layer up: hoodie.properties parsing, Hudi's bloom filter
    # (serialised into the base-file footer and the metadata table's HFiles)
    ("lakeward.core.file_group", "lakeward.core.config.properties"): "properties file format",
    ("lakeward.core.file_group.base_file", "lakeward.core.index.bloom_filter"): "base-file footer bloom filter",
    ("lakeward.core.file_group.hfile_writer", "lakeward.core.index.bloom_filter"): "HFile bloom meta block",
    # the file-slice reader merges records by the table's merge settings (payload, ordering field)
    ("lakeward.core.file_group.reader", "lakeward.core.config.table"): "merge settings of the table config",
    ("lakeward.core.file_group.reader", "lakeward.core.merge"): "record merging",
    # the secondary-index API is a table-level API that receives a TableContext (type only)
    ("lakeward.core.index.secondary.api", "lakeward.core.context"): "TableContext type",
}

#: Function-level imports of lakeward modules that stay, by (importing module, imported module prefix).
LAZY_IMPORTS: Mapping[tuple[str, str], str] = {
    # `lakeward --help` and table commands answer in < 0.5 s (issue 23): each command imports the
    # part of lakeward it needs (Table and the timeline load pyarrow; the daemon fastapi and kazoo).
    ("lakeward.services.cli", "lakeward"): "CLI start-up time",
}


@dataclass(frozen=True)
class Import:
    """One import of a lakeward module found in the source."""

    source: str  # the importing module
    target: str  # the imported module (the most specific one that exists)
    where: str  # file:line
    in_function: bool
    type_checking: bool  # under `if TYPE_CHECKING:` (never runs)


def module_files(root: Path, packages: Mapping[str, str] = PACKAGES) -> dict[str, Path]:
    """Every module of the packages, by dotted name (a package by its `__init__.py`)."""
    found = {}
    for folder, prefix in packages.items():
        for path in sorted((root / folder).rglob("*.py")):
            parts = list(path.relative_to(root / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([prefix, *parts])] = path
    return found


def _resolve(name: str, modules: Mapping[str, Path]) -> str | None:
    """The module that `name` (a module, or a name in a module) comes from; None outside the packages."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _is_type_checking(test: ast.expr) -> bool:
    return "TYPE_CHECKING" in ast.unparse(test)


def imports_of(module: str, path: Path, modules: Mapping[str, Path]) -> list[Import]:
    """The lakeward imports of one module."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[Import] = []

    def add(names: Iterable[str], node: ast.stmt, in_function: bool, type_checking: bool) -> None:
        for name in names:
            target = _resolve(name, modules)
            if target is not None and target != module:
                found.append(Import(module, target, f"{path}:{node.lineno}", in_function, type_checking))

    def visit(node: ast.AST, in_function: bool, type_checking: bool) -> None:
        for child in ast.iter_child_nodes(node):
            nested = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
            guarded = type_checking or (
                isinstance(node, ast.If) and child in node.body and _is_type_checking(node.test)
            )
            if isinstance(child, ast.Import):
                add([a.name for a in child.names], child, in_function, guarded)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    up = package.split(".")[: len(package.split(".")) - (child.level - 1)]
                    base = ".".join([*up, base] if base else up)
                add([f"{base}.{a.name}" for a in child.names], child, in_function, guarded)
            visit(child, nested, guarded)

    visit(ast.parse(path.read_text(), str(path)), False, False)
    # `from a import b, c`: one import of a.b when b is a module, else of a; a.b and a.c when both are
    return sorted({imp for imp in found if _most_specific(imp, found)}, key=lambda i: (i.where, i.target))


def _most_specific(imp: Import, found: list[Import]) -> bool:
    """False for the package `a` of `from a import b` when b itself is a module that was found."""
    return not any(o.where == imp.where and o.target.startswith(imp.target + ".") for o in found)


def import_graph(root: Path = ROOT, packages: Mapping[str, str] = PACKAGES) -> list[Import]:
    modules = module_files(root, packages)
    return [imp for name, path in modules.items() for imp in imports_of(name, path, modules)]


def layer_of(module: str) -> int:
    """The layer of a module: its index in CORE_LAYERS; the facade `lakeward.core` and services on top."""
    parts = module.split(".")
    if parts[1] == "services":
        return len(CORE_LAYERS) + 1
    if len(parts) == 2:
        return len(CORE_LAYERS)
    for rank, names in enumerate(CORE_LAYERS):
        if parts[2] in names:
            return rank
    raise AssertionError(f"{module} is in no layer of CORE_LAYERS: add its package to the layer it belongs to")


def _matches(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def cycles(edges: Iterable[tuple[str, str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


def core_imports_of_services(graph: Iterable[Import]) -> list[Import]:
    return [i for i in graph if _matches(i.source, "lakeward.core") and _matches(i.target, "lakeward.services")]


def module_level_cycles(graph: Iterable[Import]) -> list[list[str]]:
    return cycles((i.source, i.target) for i in graph if not i.in_function and not i.type_checking)


def upward_imports(graph: Iterable[Import]) -> list[Import]:
    """Imports from a core module to a module of a higher layer (every kind of import counts)."""
    return [
        i
        for i in graph
        if _matches(i.source, "lakeward.core")
        and _matches(i.target, "lakeward.core")
        and layer_of(i.target) > layer_of(i.source)
    ]


def _allowed(imp: Import, allowed: Mapping[tuple[str, str], str]) -> tuple[str, str] | None:
    for key in allowed:
        if _matches(imp.source, key[0]) and _matches(imp.target, key[1]):
            return key
    return None


def _report(found: Iterable[Import]) -> str:
    return "\n".join(f"  {i.where}: {i.source} -> {i.target}" for i in found)


GRAPH = import_graph()


def test_the_graph_sees_the_imports() -> None:
    """A guard for the checks below: the parser finds imports of every kind."""
    kinds = {(i.in_function, i.type_checking) for i in GRAPH}
    assert {(False, False), (True, False), (False, True)} <= kinds
    assert len({i.source for i in GRAPH}) > 100


def test_core_never_imports_services() -> None:
    found = core_imports_of_services(GRAPH)
    assert not found, "core imports services:\n" + _report(found)


def test_no_import_cycles_at_module_level() -> None:
    found = module_level_cycles(GRAPH)
    assert not found, "import cycles (modules importing each other at module level):\n" + "\n".join(
        "  " + " <-> ".join(c) for c in found
    )


def test_imports_point_down_the_layers() -> None:
    found = [i for i in upward_imports(GRAPH) if _allowed(i, UPWARD_IMPORTS) is None]
    assert not found, "imports pointing up the layers of ARCHITECTURE.md (CORE_LAYERS):\n" + _report(found)


def test_only_spark_and_services_import_core_spark() -> None:
    found = [
        i
        for i in GRAPH
        if _matches(i.target, "lakeward.core.spark")
        and not _matches(i.source, "lakeward.core.spark")
        and not _matches(i.source, "lakeward.services")
    ]
    assert not found, "core.spark is the Spark surface above Table; below it, use engine.spark:\n" + _report(found)


def test_no_function_level_imports_of_lakeward() -> None:
    found = [i for i in GRAPH if i.in_function and _allowed(i, LAZY_IMPORTS) is None]
    assert not found, "function-level imports of lakeward modules (import at module level):\n" + _report(found)


def test_every_package_says_what_it_owns() -> None:
    """Each package of core and services has an `__init__.py` docstring (issue 22)."""
    missing = [
        name
        for name, path in module_files(ROOT).items()
        if path.name == "__init__.py" and not ast.get_docstring(ast.parse(path.read_text()))
    ]
    assert not missing, f"packages without a docstring saying what they own: {missing}"


@pytest.mark.parametrize(("allowed", "kind"), [(UPWARD_IMPORTS, "upward"), (LAZY_IMPORTS, "lazy")])
def test_every_allowed_import_still_exists(allowed: Mapping[tuple[str, str], str], kind: str) -> None:
    candidates = upward_imports(GRAPH) if kind == "upward" else [i for i in GRAPH if i.in_function]
    used = {_allowed(i, allowed) for i in candidates}
    stale = [key for key in allowed if key not in used]
    assert not stale, f"allowed {kind} imports that no longer happen (delete them from the list): {stale}"


def test_checks_find_seeded_violations(tmp_path: Path) -> None:
    """A small tree with one violation of each kind: every check reports it."""
    files = {
        "core/__init__.py": "",
        "core/storage/__init__.py": "from lakeward.core.timeline import x\n",  # up: storage -> timeline
        "core/timeline/__init__.py": "from lakeward.core.storage import y\n",  # with the line above: a cycle
        "core/table.py": "def f():\n    from lakeward.services import daemon\n",  # services; in a function
        "services/__init__.py": "",
        "services/daemon.py": "from ..core import table\n",  # relative: resolved, allowed
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    graph = import_graph(tmp_path)
    assert [(i.source, i.target) for i in core_imports_of_services(graph)] == [
        ("lakeward.core.table", "lakeward.services.daemon")
    ]
    assert module_level_cycles(graph) == [["lakeward.core.storage", "lakeward.core.timeline"]]
    assert [(i.source, i.target) for i in upward_imports(graph)] == [
        ("lakeward.core.storage", "lakeward.core.timeline")
    ]
    assert [(i.source, i.in_function) for i in graph if i.in_function] == [("lakeward.core.table", True)]
    assert ("lakeward.services.daemon", "lakeward.core.table") in {(i.source, i.target) for i in graph}
