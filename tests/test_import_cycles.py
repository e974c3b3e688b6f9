"""No import cycles in the package: every module's imports, read with ``ast``, form a DAG.

Imports inside functions count (a lazy import is still a dependency, and a cycle through
one breaks as soon as someone hoists it); imports under ``if TYPE_CHECKING:`` do not (they
never run). ``from ctxledger.x import name`` is an edge to ``ctxledger.x.name`` when that
is a module, else to ``ctxledger.x``. Importing a submodule also runs its package's
``__init__``, but that is not counted: a package importing its own submodules would
otherwise be a cycle with each of them.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
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


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import under ``node``, skipping the bodies of ``if TYPE_CHECKING:``."""
    if isinstance(node, ast.If) and _is_type_checking(node.test):
        for child in node.orelse:
            yield from _imports(child)
        return
    if isinstance(node, ast.Import | ast.ImportFrom):
        yield node
    for child in ast.iter_child_nodes(node):
        yield from _imports(child)


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
    for node in _imports(tree):
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


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's components of more than one module (iterative: no recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
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
    return found


def a_cycle(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """One cycle through the component's first module, as ``[a, b, ..., a]``."""
    start = component[0]
    members = set(component)
    paths = {start: [start]}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for child in sorted(graph[node] & members):
            if child == start:
                return [*paths[node], start]
            if child not in paths:
                paths[child] = [*paths[node], child]
                queue.append(child)
    raise AssertionError(f"no cycle through {start}")  # a component always has one


def test_the_graph_sees_the_package() -> None:
    graph = import_graph()
    assert {"ctxledger", "ctxledger.store", "ctxledger.assembler.api"} <= set(graph)
    # The facade imports the store: edges across the folders are resolved.
    assert any(t.startswith("ctxledger.store.") for t in graph["ctxledger.cli"]) or any(
        t.startswith("ctxledger.store.") for deps in graph.values() for t in deps)


def test_a_cycle_is_found_and_printed() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert strongly_connected(graph) == [["a", "b", "c"]]
    assert a_cycle(graph, ["a", "b", "c"]) == ["a", "b", "c", "a"]


def test_no_import_cycles() -> None:
    graph = import_graph()
    cycles = [" -> ".join(a_cycle(graph, c)) for c in strongly_connected(graph)]
    assert not cycles, "import cycles:\n" + "\n".join(cycles)
