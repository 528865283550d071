"""The shape of the house (docs/architecture.md), checked on the source so that it cannot creep back.

``lint-imports`` checks the layers; this checks what it does not: no import cycle between modules (lazy
in-function imports included: they run too, only later), the GUI importing nothing of the terminal commands,
one definition of each type the two processes share, and the size of modules and package folders.
Imports under ``if TYPE_CHECKING:`` are left out of the import-time graph (they never run) and checked for cycles
on their own graph (a cycle through them is one in all but name).
"""

from __future__ import annotations

import ast
import collections
from collections.abc import Iterator
from pathlib import Path

import pytest

APP = Path(__file__).resolve().parents[2] / "app"
PACKAGE = "outrider"

# The types both processes (and the history) share: each is defined once, in this module.
SHARED_TYPES: dict[str, str] = {
    "StepEvent": "outrider.engine.events",
    "StepBatch": "outrider.engine.events",
    "DoneEvent": "outrider.engine.events",
    "LoadedPair": "outrider.engine.events",
    "ModelFacts": "outrider.engine.events",
    "LoadProgress": "outrider.engine.events",
    "ErrorKind": "outrider.engine.events",
    "GenerationStats": "outrider.engine.stats",
    "TextRequest": "outrider.engine.params",
    "PairSpec": "outrider.engine.params",
    "DraftParams": "outrider.engine.params",
    "SamplingParams": "outrider.engine.params",
    "ChatMessage": "outrider.engine.params",
    "ReplyStats": "outrider.history.models",
}
# Public class names defined in more than one module on purpose.
SAME_NAME_ALLOWED = {"DiskFullError"}  # the history's database vs a download's folder: two failures, one wording


# ---------------------------------------------------------------------------------------------- the import graph


def module_names(root: Path, package: str) -> dict[str, Path]:
    """Every module of ``package`` under ``root``: dotted name -> file (a package is its ``__init__.py``)."""
    names: dict[str, Path] = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names[".".join(parts)] = path
    return names


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_nodes(node: ast.AST, type_checking: bool = False) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement, at any depth (functions, methods, try blocks); those under ``if TYPE_CHECKING:``
    only with ``type_checking`` (they never run, but a cycle through them is one in all but name)."""
    if isinstance(node, ast.If) and _is_type_checking(node.test) and not type_checking:
        for child in node.orelse:
            yield from _import_nodes(child, type_checking)
        return
    if isinstance(node, ast.Import | ast.ImportFrom):
        yield node
        return
    for child in ast.iter_child_nodes(node):
        yield from _import_nodes(child, type_checking)


def imports_of(name: str, path: Path, modules: dict[str, Path], type_checking: bool = False) -> set[str]:
    """The modules of the package that module ``name`` imports, at import time or later (and with
    ``type_checking``, for the type checker)."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in _import_nodes(ast.parse(path.read_text(encoding="utf-8"), str(path)), type_checking):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in modules)
            continue
        base = node.module or ""
        if node.level:  # relative: from the module's own package, one level up per extra dot
            anchor = name.split(".") if is_package else name.split(".")[:-1]
            anchor = anchor[: len(anchor) - (node.level - 1)]
            base = ".".join([*anchor, base] if base else anchor)
        for alias in node.names:
            candidate = f"{base}.{alias.name}"
            if candidate in modules:  # from a.b import c, c a module
                found.add(candidate)
            elif base in modules:  # from a.b import name
                found.add(base)
    found.discard(name)
    return found


def import_graph(root: Path, package: str, type_checking: bool = False) -> dict[str, set[str]]:
    modules = module_names(root, package)
    return {name: imports_of(name, path, modules, type_checking) for name, path in modules.items()}


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (``[a, b, …, a]``) per strongly connected component of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [_a_cycle_in(sorted(component), graph) for component in components]


def _a_cycle_in(component: list[str], graph: dict[str, set[str]]) -> list[str]:
    """A shortest path from the component's first module back to itself, for a readable message."""
    members = set(component)
    start = component[0]
    previous: dict[str, str] = {}
    queue = collections.deque([start])
    while queue:
        node = queue.popleft()
        for target in sorted(graph[node] & members):
            if target == start:
                path = [node]
                while path[-1] != start:
                    path.append(previous[path[-1]])
                return [start, *reversed(path[:-1]), start] if len(path) > 1 else [start, node, start]
            if target not in previous:
                previous[target] = node
                queue.append(target)
    return component  # unreachable for a strongly connected component


# ------------------------------------------------------------------------------------------------------- tests


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph(APP, PACKAGE)


def test_no_import_cycle_lazy_imports_included(graph: dict[str, set[str]]) -> None:
    cycles = import_cycles(graph)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(cycle) for cycle in cycles)


def test_no_import_cycle_for_the_type_checker_either() -> None:
    """Imports under ``if TYPE_CHECKING:`` never run, but two modules that need each other's types are one
    concept in two files. Breaking it: ``engine/grammar.py`` imported ``Draft`` from ``engine/drafters.py`` for
    its annotations while the drafters imported ``GrammarMask`` (the cycle this reported until ``Draft`` moved
    to ``engine/draft.py``)."""
    cycles = import_cycles(import_graph(APP, PACKAGE, type_checking=True))
    assert not cycles, "import cycles (TYPE_CHECKING included):\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_the_gui_imports_nothing_of_the_terminal_commands(graph: dict[str, set[str]]) -> None:
    wrong = sorted(
        f"{name} imports {target}"
        for name, targets in graph.items() if name.startswith("outrider.ui")
        for target in targets if target == "outrider.cli" or target.startswith("outrider.commands")
    )
    assert not wrong


def _top_level_classes() -> dict[str, list[str]]:
    defined: dict[str, list[str]] = collections.defaultdict(list)
    for name, path in module_names(APP, PACKAGE).items():
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef):
                defined[node.name].append(name)
    return defined


def test_each_shared_type_is_defined_once_where_the_docs_say() -> None:
    defined = _top_level_classes()
    assert {name: defined.get(name) for name in SHARED_TYPES} == {
        name: [module] for name, module in SHARED_TYPES.items()
    }


def test_no_public_class_name_is_defined_twice() -> None:
    twice = {name: modules for name, modules in _top_level_classes().items()
             if len(modules) > 1 and not name.startswith("_") and name not in SAME_NAME_ALLOWED}
    assert not twice


# ------------------------------------------------------------------------------ the checker finds what it should


def _write(root: Path, files: dict[str, str]) -> None:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def test_the_cycle_finder_sees_lazy_relative_and_package_imports(tmp_path: Path) -> None:
    _write(tmp_path, {
        "pkg/__init__.py": "from pkg.a import A\n",
        "pkg/a.py": "A = 1\n\ndef later():\n    from pkg.sub import b\n",
        "pkg/sub/__init__.py": "",
        "pkg/sub/b.py": "from ..c import C\n",
        "pkg/c.py": "import pkg.a\nC = 2\n",
        "pkg/d.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.e import E\n",
        "pkg/e.py": "from pkg.d import *\nE = 3\n",
        "pkg/f.py": "from pkg import A\n",  # the package's __init__, which imports a: no cycle back to f
    })
    graph = import_graph(tmp_path, "pkg")
    assert graph["pkg.a"] == {"pkg.sub.b"} and graph["pkg.sub.b"] == {"pkg.c"} and graph["pkg.f"] == {"pkg"}
    assert graph["pkg.d"] == set()  # TYPE_CHECKING imports never run
    assert import_cycles(graph) == [["pkg.a", "pkg.sub.b", "pkg.c", "pkg.a"]]
    typed = import_graph(tmp_path, "pkg", type_checking=True)  # for the type checker they count
    assert typed["pkg.d"] == {"pkg.e"} and ["pkg.d", "pkg.e", "pkg.d"] in import_cycles(typed)


def test_the_cycle_finder_reports_a_cycle_through_a_package_init(tmp_path: Path) -> None:
    _write(tmp_path, {
        "pkg/__init__.py": "from pkg.store import Store\n",
        "pkg/store.py": "def open_it():\n    from pkg import helper\n",
        "pkg/helper.py": "",
    })
    graph = import_graph(tmp_path, "pkg")
    assert graph["pkg.store"] == {"pkg.helper"}  # a submodule named in "from pkg import …" is that module
    _write(tmp_path, {"pkg/store.py": "def open_it():\n    from pkg import Store\n"})
    assert import_cycles(import_graph(tmp_path, "pkg")) == [["pkg", "pkg.store", "pkg"]]
