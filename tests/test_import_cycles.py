"""No import cycles in the package: every module's imports, read with ``ast``, form a DAG.

Every import counts: one inside a function (a lazy import is still a dependency, and a
cycle through one breaks as soon as someone hoists it) and one under ``if TYPE_CHECKING:``
(a type-only import still ties the two modules together: neither can be read, checked or
moved without the other). ``from ctxledger.x import name`` is an edge to
``ctxledger.x.name`` when that is a module, else to ``ctxledger.x``. Importing a
submodule also runs its package's ``__init__``, but that is not counted: a package
importing its own submodules would otherwise be a cycle with each of them.
"""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "ctxledger"
# The checkout's top-level folders are subpackages of ctxledger (see ctxledger/__init__.py).
FOLDERS = {"ctxledger": PACKAGE, "store": f"{PACKAGE}.store",
           "projections": f"{PACKAGE}.projections", "assembler": f"{PACKAGE}.assembler"}


def module_files() -> dict[str, Path]:
    """Every module of the package by its dotted name."""
    found: dict[str, Path] = {}
    for folder, prefix in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            if folder == "ctxledger" and parts and parts[0] in FOLDERS:
                continue  # a wheel-style copy inside ctxledger/ would be seen twice
            found[".".join([prefix, *parts])] = path
    return found


def _base(name: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute module an ``ImportFrom`` names (relative imports resolved)."""
    if not node.level:
        return node.module or ""
    parts = name.split(".")
    anchor = parts if is_package else parts[:-1]
    anchor = anchor[: len(anchor) - (node.level - 1)]
    return ".".join([*anchor, *([node.module] if node.module else [])])


def imports_of(name: str, path: Path, modules: set[str]) -> set[str]:
    """The package's modules that module ``name`` imports."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    targets: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Import | ast.ImportFrom):
            continue
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
            continue
        base = _base(name, path.name == "__init__.py", node)
        for alias in node.names:
            sub = f"{base}.{alias.name}"
            targets.add(sub if sub in modules else base)
    return {t for t in targets if t in modules and t != name}


def import_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports."""
    files = module_files()
    names = set(files)
    return {name: imports_of(name, path, names) for name, path in files.items()}


def a_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as ``[a, b, ..., a]``, or None when the graph is a DAG."""
    try:
        TopologicalSorter(graph).prepare()
    except CycleError as error:
        found: list[str] = error.args[1]
        return found[::-1]  # graphlib lists it against the import direction
    return None


def test_the_graph_sees_the_package() -> None:
    graph = import_graph()
    assert {"ctxledger", "ctxledger.store", "ctxledger.assembler.api"} <= set(graph)
    # The facade imports the store: edges across the folders are resolved.
    assert any(t.startswith("ctxledger.store.") for t in graph["ctxledger.cli"]) or any(
        t.startswith("ctxledger.store.") for deps in graph.values() for t in deps)


def test_a_cycle_is_found_and_printed() -> None:
    cycle = a_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}})
    assert cycle is not None and cycle[0] == cycle[-1] and set(cycle) == {"a", "b", "c"}
    assert a_cycle({"a": {"b"}, "b": set(), "d": {"a", "b"}}) is None


def test_a_type_only_import_is_an_edge() -> None:
    graph = import_graph()
    # readout names BookState for its annotations only; the edge still counts.
    assert "ctxledger.assembler.profiles.novel.book" in graph[
        "ctxledger.assembler.profiles.novel.readout"]


def test_no_import_cycles() -> None:
    cycle = a_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])
