"""The layers import one way: store <- projections <- assembler <- ctxledger.

- Followed through every module a module imports, at any depth and wherever the import
  stands (module level, inside a function, under ``TYPE_CHECKING``): a layer reaches
  nothing above it, and the assembler reaches no database library.
- In a fresh process, the assembler and every module under it (all profiles) load no
  SQLAlchemy, Alembic or psycopg.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ("store", "projections", "assembler", "migrations")
DATABASE = ("sqlalchemy", "alembic", "psycopg")


def _path_of(module: str) -> Path | None:
    """The source file of a ``ctxledger`` module in this checkout (None: not ours)."""
    parts = module.split(".")
    if parts[0] != "ctxledger" or len(parts) == 1:
        return None
    base = ROOT / parts[1] if parts[1] in LAYERS else ROOT / "ctxledger" / parts[1]
    where = base.joinpath(*parts[2:])
    for candidate in (where / "__init__.py", where.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def _module_of(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    if parts[0] == "ctxledger":
        parts.pop(0)
    return ".".join(["ctxledger", *parts])


def _named(node: ast.AST) -> Iterator[str]:
    """The modules one import statement names (``from a import b``: ``a.b`` if a module)."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        yield node.module
        for alias in node.names:
            if _path_of(f"{node.module}.{alias.name}") is not None:
                yield f"{node.module}.{alias.name}"


def _type_only(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and ast.unparse(node.test) in {
        "TYPE_CHECKING", "typing.TYPE_CHECKING"}


def _walk(node: ast.AST, *, typing: bool) -> Iterator[ast.AST]:
    """Every node under ``node``; ``typing=False`` skips ``if TYPE_CHECKING:`` bodies."""
    for child in ast.iter_child_nodes(node):
        if not typing and _type_only(child):
            assert isinstance(child, ast.If)
            for other in child.orelse:
                yield other
                yield from _walk(other, typing=typing)
            continue
        yield child
        yield from _walk(child, typing=typing)


@cache
def _direct(module: str, *, typing: bool = False) -> frozenset[str]:
    """Every module ``module`` imports anywhere in its source (with ``typing``, also
    under ``TYPE_CHECKING``), plus its parent packages below ``ctxledger`` (importing a
    module runs them)."""
    path = _path_of(module)
    if path is None:
        return frozenset()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = {name for node in _walk(tree, typing=typing) for name in _named(node)}
    parts = module.split(".")
    found.update(".".join(parts[:end]) for end in range(2, len(parts)))
    found.discard(module)
    return frozenset(found)


def _reached(module: str) -> dict[str, str]:
    """Every module reachable from ``module``, each with the module that imports it.

    The module's own type-only imports count (a layer may not even name a type above
    it); past it, only imports that run at import or call time are followed.
    """
    via: dict[str, str] = {}
    todo = [module]
    while todo:
        current = todo.pop()
        for name in sorted(_direct(current, typing=current == module)):
            if name not in via and name != module:
                via[name] = current
                todo.append(name)
    return via


def _layer(module: str) -> str:
    """``ctxledger.store.x`` -> ``store``; ``ctxledger.cli`` -> ``ctxledger``; ``x.y`` -> ``x``."""
    parts = module.split(".")
    if parts[0] == "ctxledger" and len(parts) > 1 and parts[1] in LAYERS:
        return parts[1]
    return parts[0]


def _chain(module: str, target: str, via: dict[str, str]) -> str:
    steps = [target]
    while steps[-1] != module and steps[-1] in via:
        steps.append(via[steps[-1]])
    return " <- ".join(steps)


@pytest.mark.parametrize(("layer", "forbidden"), [
    ("store", {"projections", "assembler", "ctxledger"}),
    ("projections", {"assembler", "ctxledger"}),
    ("assembler", {"ctxledger", *DATABASE}),
])
def test_layers_import_one_way(layer: str, forbidden: set[str]) -> None:
    offenders: dict[str, str] = {}
    for path in sorted((ROOT / layer).rglob("*.py")):
        module = _module_of(path)
        via = _reached(module)
        for target in sorted(via):
            if _layer(target) in forbidden:
                offenders[str(path.relative_to(ROOT))] = _chain(module, target, via)
                break
    assert offenders == {}


def test_the_graph_follows_imports_inside_functions() -> None:
    # The facade imports the assembler inside its methods only; the graph must see it.
    assert "ctxledger.assembler.api" in _reached("ctxledger._ledger")
    assert "sqlalchemy" in _reached("ctxledger.projections.token_cache")


PROBE = """
import importlib, json, pkgutil, sys
import ctxledger.assembler as assembler
names = sorted(info.name for info in pkgutil.walk_packages(assembler.__path__,
                                                           "ctxledger.assembler."))
for name in names:
    importlib.import_module(name)
for name in assembler.__all__:
    getattr(assembler, name)
loaded = sorted(m for m in sys.modules if m.split(".")[0] in json.loads(sys.argv[1]))
print(json.dumps({"modules": names, "database": loaded}))
"""


def test_the_assembler_loads_no_database_library(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", PROBE, json.dumps(DATABASE)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120,
                          check=True)
    found = json.loads(done.stdout.strip().splitlines()[-1])
    expected = {_module_of(path) for path in (ROOT / "assembler").rglob("*.py")}
    assert set(found["modules"]) | {"ctxledger.assembler"} == expected
    assert found["database"] == []
