"""docs/SPEC.md stands on its own: every ``SPEC §N "Heading"`` the code and docs cite is a
heading of it, and it announces nothing as arriving later that has shipped."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "docs" / "SPEC.md"
CITATION = re.compile(r'SPEC §(\d+)(?: card)? "([^"]+)"')
SOURCES = ("README.md", "docs", "ctxledger", "store", "projections", "assembler", "tests")


def _cited() -> set[tuple[str, str]]:
    found: set[tuple[str, str]] = set()
    for top in SOURCES:
        path = ROOT / top
        files = [path] if path.is_file() else [
            f for f in path.rglob("*") if f.suffix in (".py", ".md") and f.is_file()]
        for file in files:
            if file.resolve() == Path(__file__).resolve():
                continue
            found.update(CITATION.findall(file.read_text(encoding="utf-8")))
    return found


def test_every_cited_spec_heading_exists() -> None:
    text = SPEC.read_text(encoding="utf-8")
    headings = re.findall(r"^#{2,3} (.+)$", text, re.MULTILINE)
    sections = {h.split(".")[0] for h in headings if h[0].isdigit()}
    cited = _cited()
    assert cited  # the pattern still matches how the code cites
    for number, title in sorted(cited):
        assert number in sections, f"SPEC §{number} is not a section"
        named = any(title in h for h in headings) or f"**{title}.**" in text
        assert named, f'SPEC §{number} "{title}" is cited but not a heading of docs/SPEC.md'


def test_nothing_shipped_is_announced_for_later() -> None:
    text = SPEC.read_text(encoding="utf-8")
    assert "later release" not in text


DOC_FILES = ("README.md", "CHANGELOG.md", "CONTRIBUTING.md", "benchmarks/README.md",
             "benchmarks/HISTORY.md")
README_LIMIT = 30_000
# "issue 13", "seeds #4", "Issue #6": a number a reader of the repository cannot resolve.
NUMBERED_CITATION = re.compile(r"\b(issue|seed)s? #?\d+", re.IGNORECASE)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def _doc_files() -> list[Path]:
    return [ROOT / name for name in DOC_FILES] + sorted((ROOT / "docs").glob("*.md"))


def _slug(heading: str) -> str:
    """The anchor GitHub gives a heading."""
    text = heading.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for heading in re.findall(r"^#{1,6} (.+)$", text, re.MULTILINE):
        slug = _slug(heading)
        candidate, n = slug, 0
        while candidate in found:
            n += 1
            candidate = f"{slug}-{n}"
        found.add(candidate)
    return found


def test_readme_stays_short() -> None:
    size = len((ROOT / "README.md").read_bytes())
    assert size < README_LIMIT, f"README.md is {size} bytes; move detail into docs/"


CODE_FOLDERS = ("ctxledger", "store", "projections", "assembler", "migrations", "tests",
                "benchmarks", "scripts", "examples")


def _code_files() -> list[Path]:
    """Every Python file of the repository's own folders (its comments and docstrings)."""
    return sorted(path for folder in CODE_FOLDERS for path in (ROOT / folder).rglob("*.py")
                  if "__pycache__" not in path.parts)


def test_no_doc_or_comment_cites_an_issue_or_seed_by_number() -> None:
    this = Path(__file__).resolve()
    for path in [*_doc_files(), *(p for p in _code_files() if p.resolve() != this)]:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            match = NUMBERED_CITATION.search(line)
            assert match is None, (f"{path.relative_to(ROOT)}:{number} cites "
                                   f"{match.group(0)!r}: say what was asked instead")


def test_relative_links_between_docs_resolve() -> None:
    for path in _doc_files():
        text = FENCE.sub("", path.read_text(encoding="utf-8"))
        for target in LINK.findall(text):
            if re.match(r"[a-z]+:", target):
                continue  # http(s), mailto: not ours to check
            file_part, _, anchor = target.partition("#")
            linked = (path.parent / file_part).resolve() if file_part else path
            where = f"{path.relative_to(ROOT)} links to {target}"
            assert linked.exists(), f"{where}: no such file"
            if anchor and linked.suffix == ".md":
                assert anchor in _anchors(linked), f"{where}: no such heading"


def test_every_path_the_architecture_page_names_exists() -> None:
    # Paths in the rule table and the folder map (a bare ``io/`` is a subfolder named
    # under its parent's bullet; only paths from the root are checked).
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    named = re.findall(r"`((?:store|projections|assembler|ctxledger|tests|scripts)/[^`\s]*)`",
                       text)
    assert len(named) > 20
    missing = [path for path in named if not (ROOT / path).exists()]
    assert not missing, f"docs/ARCHITECTURE.md names paths that do not exist: {missing}"


# -- the code blocks of docs/ run (scripts/readme.py runs each twice; test_readme.py runs it)

PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


def _readme_script() -> ModuleType:
    if "readme_script" in sys.modules:
        return sys.modules["readme_script"]
    spec = importlib.util.spec_from_file_location("readme_script",
                                                  ROOT / "scripts" / "readme.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["readme_script"] = module
    spec.loader.exec_module(module)
    return module


def test_every_python_block_of_the_docs_is_whole(tmp_path: Path) -> None:
    # No fragment: every name defined in the block, no await outside a function, once the
    # lines that call a provider (``# not run:``) are left out as the docs runner does.
    script = _readme_script()
    files: list[Path] = []
    for page in sorted((ROOT / "docs").glob("*.md")):
        assert script.runs_every_python_block(page)
        for number, code in enumerate(PYTHON_BLOCK.findall(page.read_text(encoding="utf-8"))):
            path = tmp_path / f"{page.stem.replace('-', '_')}_{number}.py"
            path.write_text("\n".join(script.runnable(code.split("\n"))), encoding="utf-8")
            files.append(path)
    assert len(files) >= 8
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--isolated", "--no-cache",
                           "--select", "F821,F822,F704,PLE1142", *map(str, files)],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_provider_call_is_left_out_with_its_indentation() -> None:
    script = _readme_script()
    code = ["async def main():",
            "    await Runner.run(agent, 'hi')  # not run: calls OpenAI",
            "x = 1  # not a marker: kept"]
    assert script.runnable(code) == ["async def main():", "    pass",
                                     "x = 1  # not a marker: kept"]


def test_a_block_that_works_only_once_fails_the_docs_run(tmp_path: Path) -> None:
    script = _readme_script()
    page = ROOT / "docs" / "python.md"
    once = ["from pathlib import Path", "Path('made').mkdir()", "print('made')"]
    with pytest.raises(SystemExit, match=r"docs/python\.md \(line 7\) failed"):
        script.run_python_twice(once, tmp_path, page, 7)
    drift = ["from pathlib import Path", "p = Path('n')",
             "p.write_text(str(int(p.read_text()) + 1) if p.exists() else '1')",
             "print(p.read_text())"]
    with pytest.raises(SystemExit, match="prints differently when run a second time"):
        script.run_python_twice(drift, tmp_path, page, 9)
    assert script.run_python_twice(["print('same')"], tmp_path, page, 1) == ["same"]
