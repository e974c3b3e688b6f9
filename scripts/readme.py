"""Regenerate (or check) the real outputs shown in the docs, and the CLI reference.

    python scripts/readme.py            # rewrite the outputs and docs/cli.md
    python scripts/readme.py --check    # exit 1 and show a diff if anything is stale

The pages are README.md, then every docs/*.md in name order. Three markers, each on the
line right before a fenced block:

- ``<!-- readme: file NAME -->``: the block is written to the file NAME first.
- ``<!-- readme: shell -->``: the block's ``$ `` lines are commands (a line ending in
  ``\\`` continues on the next). They run with bash, in order, and the block becomes each
  command followed by what it printed (stdout and stderr).
- ``<!-- readme: python-output -->``: the block becomes what the nearest ``python`` block
  above it, on the same page, printed.
- ``<!-- readme: pytest -->``: the block (a test module) is run by pytest.

Every ``python`` block of docs/*.md runs, marked or not, twice in a row: both runs must
succeed and print the same (masked) output, so a snippet that works only once (a stream
it creates, a row it expects to be alone) fails here as it would for a reader who runs it
again. A line ending in ``# not run: WHY`` is the one that calls a model provider (a
network service needing an API key): it is replaced by ``pass`` and the rest of the block
runs. README.md's Python blocks run once, for their outputs.

All pages share one temporary folder, page after page and top to bottom, so a database
that an earlier block creates (the README's ``demo.db``) is there for a later block of any
page; Python blocks run in a subfolder of their own. ``ctxledger`` is the one next to this
Python, and the environment is fixed (120 columns, no colour, no ``CTXLEDGER_DB``). What
still differs between two runs (generated event ids, hashes over recorded times, the times
themselves, elapsed seconds) is masked when ``--check`` compares, and written as it came
out otherwise.

docs/cli.md is the command line's one page: a hand-written guide, then (after
``REFERENCE_MARKER``) the reference written from the Typer app (``ctxledger.cli.app``)
through click's introspection: every command, its help, arguments and options with their
defaults, in name order, with no dependence on the terminal's width.
"""

from __future__ import annotations

import argparse
import difflib
import inspect
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
CLI_REFERENCE = DOCS / "cli.md"
MARKER = re.compile(r"^<!-- readme: (shell|python-output|file|pytest) ?([^ ]*) -->$")
# The line of a Python block that calls a provider: not run (see the module's docstring).
NOT_RUN = re.compile(r"^(\s*)\S.*#\s*not run: .+$")
VOLATILE = (
    (re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"), "<uuid>"),
    (re.compile(r"\b[0-9a-f]{64}\b"), "<sha256>"),
    (re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d(:\d\d(\.\d+)?)?Z?"), "<time>"),
    (re.compile(r'"seconds": ?[0-9.]+'), '"seconds":<s>'),
    (re.compile(r"\d+:\d\d:\d\d$", re.MULTILINE), "<elapsed>"),
)
FENCE = re.compile(r"^```")
TIMEOUT = 300


@dataclass
class Block:
    """A fenced block: its kind (marker), the line of its opening fence, and its body."""

    kind: str | None
    argument: str
    language: str
    start: int
    end: int
    body: list[str]


def pages() -> list[Path]:
    """The pages whose marked blocks are regenerated: README.md, then docs/*.md by name."""
    return [README, *sorted(DOCS.glob("*.md"))]


def shown(path: Path) -> str:
    """``path`` as the diffs and messages name it (relative to the repository)."""
    return path.relative_to(ROOT).as_posix()


def blocks(lines: list[str]) -> list[Block]:
    """Every fenced block of ``lines``, with the marker right before it if any."""
    found: list[Block] = []
    index = 0
    while index < len(lines):
        if FENCE.match(lines[index]):
            start = index
            language = lines[index][3:].strip()
            index += 1
            while index < len(lines) and not FENCE.match(lines[index]):
                index += 1
            marker = MARKER.match(lines[start - 1]) if start > 0 else None
            found.append(Block(marker.group(1) if marker else None,
                               marker.group(2) if marker else "", language, start, index,
                               lines[start + 1:index]))
        index += 1
    return found


def environment(folder: Path) -> dict[str, str]:
    """A fixed environment: this venv's commands first, 120 columns, no colour."""
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("CTXLEDGER_", "FORCE_COLOR", "PYTEST"))}
    env.update({"COLUMNS": "120", "LINES": "50", "NO_COLOR": "1", "TERM": "dumb",
                "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
                "HOME": str(folder), "PYTHONHASHSEED": "0",
                # No hook's warm worker outlives the page it ran for.
                "CTXLEDGER_HOOK_WORKER_IDLE": "0"})
    return env


def commands(body: list[str]) -> list[str]:
    """The ``$ `` commands of a shell block, continuation lines joined."""
    out: list[str] = []
    pending: list[str] | None = None
    for line in body:
        if pending is not None:
            pending.append(line)
            if not line.endswith("\\"):
                out.append("\n".join(pending))
                pending = None
        elif line.startswith("$ "):
            if line.endswith("\\"):
                pending = [line[2:]]
            else:
                out.append(line[2:])
    if pending is not None:
        out.append("\n".join(pending))
    return out


def run_shell(body: list[str], folder: Path) -> list[str]:
    """Each command of the block followed by its output."""
    result: list[str] = []
    for command in commands(body):
        lines = command.split("\n")
        result.append(f"$ {lines[0]}")
        result.extend(lines[1:])
        # One stream for both, interleaved as a terminal shows them.
        done = subprocess.run(["bash", "-c", command], cwd=folder, env=environment(folder),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=TIMEOUT, check=False)
        output = done.stdout.rstrip("\n")
        result.extend(line.rstrip() for line in output.split("\n") if output)
    return result


def runnable(code: list[str]) -> list[str]:
    """``code`` with each line marked ``# not run: ...`` replaced by ``pass``."""
    return [(f"{match.group(1)}pass" if (match := NOT_RUN.match(line)) else line)
            for line in code]


def run_python(code: list[str], folder: Path, page: Path, line: int = 0) -> list[str]:
    """What the Python code printed (its ``# not run:`` lines left out)."""
    done = subprocess.run([sys.executable, "-c", "\n".join(runnable(code))], cwd=folder,
                          env=environment(folder), capture_output=True, text=True,
                          timeout=TIMEOUT, check=False)
    if done.returncode != 0:
        where = f" (line {line})" if line else ""
        raise SystemExit(f"a python block of {shown(page)}{where} failed:\n{done.stderr}")
    return [line.rstrip() for line in done.stdout.rstrip("\n").split("\n")]


def run_python_twice(code: list[str], folder: Path, page: Path, line: int) -> list[str]:
    """What the Python code printed, run twice in a row in ``folder``; the second run must
    succeed and print the same (masked) output as the first."""
    first = run_python(code, folder, page, line)
    second = run_python(code, folder, page, line)
    if masked("\n".join(first)) != masked("\n".join(second)):
        diff = "\n".join(difflib.unified_diff(first, second, "first run", "second run",
                                              lineterm=""))
        raise SystemExit(f"the python block of {shown(page)} at line {line} prints "
                         f"differently when run a second time:\n{diff}")
    return first


def run_pytest(code: list[str], folder: Path, page: Path, line: int) -> None:
    """Run the test module ``code`` with pytest, twice, in a folder of its own."""
    tests = folder / f"pytest-{page.stem}-{line}"
    tests.mkdir(exist_ok=True)
    (tests / "test_docs_example.py").write_text("\n".join(code) + "\n", encoding="utf-8")
    for _ in range(2):
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               "test_docs_example.py"], cwd=tests, env=environment(tests),
                              capture_output=True, text=True, timeout=TIMEOUT, check=False)
        if done.returncode != 0:
            raise SystemExit(f"the pytest block of {shown(page)} at line {line} failed:\n"
                             f"{done.stdout[-3000:]}{done.stderr[-2000:]}")


def runs_every_python_block(page: Path) -> bool:
    """Whether every Python block of ``page`` runs (docs/), or only those whose output
    is shown (README.md)."""
    return page != README


def regenerate(text: str, page: Path, folder: Path) -> str:
    """``text`` (the page ``page``) with every marked block's output produced again.

    Commands run in ``folder``, which earlier pages may have filled already.
    """
    lines = text.split("\n")
    replacements: list[tuple[Block, list[str]]] = []
    python_folder = folder / "python"
    python_folder.mkdir(exist_ok=True)
    last_python: Block | None = None
    outputs: dict[int, list[str]] = {}
    every = runs_every_python_block(page)
    for block in blocks(lines):
        if block.kind == "pytest":
            run_pytest(block.body, folder, page, block.start + 1)
        elif block.language == "python":
            last_python = block
            if every:
                outputs[block.start] = run_python_twice(block.body, python_folder, page,
                                                        block.start + 1)
        if block.kind == "file":
            (folder / block.argument).write_text("\n".join(block.body) + "\n",
                                                 encoding="utf-8")
        elif block.kind == "shell":
            replacements.append((block, run_shell(block.body, folder)))
        elif block.kind == "python-output":
            if last_python is None:
                raise SystemExit(f"{shown(page)} line {block.start + 1}: python-output "
                                 "with no python block above it")
            output = outputs.get(last_python.start)
            if output is None:
                output = run_python(last_python.body, python_folder, page,
                                    last_python.start + 1)
            replacements.append((block, output))
    for block, body in reversed(replacements):
        lines[block.start + 1:block.end] = body
    return "\n".join(lines)


def masked(text: str) -> str:
    """``text`` with what differs between runs replaced by placeholders."""
    for pattern, placeholder in VOLATILE:
        text = pattern.sub(placeholder, text)
    return text


def _cell(text: str) -> str:
    """``text`` fit for one cell of a markdown table."""
    return " ".join(text.split()).replace("|", "\\|")


def _params_table(command: Any, ctx: Any) -> list[str]:
    """The arguments and options of ``command`` as a markdown table (none: no lines)."""
    rows: list[str] = []
    for param in command.params:
        if getattr(param, "hidden", False):
            continue
        record = param.get_help_record(ctx)
        if record is None:
            continue
        declaration, help_text = record
        kind = "argument" if param.param_type_name == "argument" else "option"
        rows.append(f"| `{_cell(declaration)}` | {kind} | {_cell(help_text)} |")
    if not rows:
        return []
    return ["| argument or option | kind | description |", "|---|---|---|", *rows, ""]


def _usage(command: Any, ctx: Any) -> str:
    """The usage line of ``command`` (its full path, then its usage pieces)."""
    return " ".join([ctx.command_path, *command.collect_usage_pieces(ctx)])


def _help(command: Any) -> str:
    """The help text of ``command``, dedented."""
    return inspect.cleandoc(command.help or "")


def _commands(group: Any, ctx: Any) -> list[tuple[Any, Any]]:
    """Every visible command under ``group``, depth first, each level in name order."""
    found: list[tuple[Any, Any]] = []
    for name in sorted(group.list_commands(ctx)):
        command = group.get_command(ctx, name)
        if command is None or command.hidden:
            continue
        sub_ctx = command.context_class(command, info_name=name, parent=ctx)
        found.append((command, sub_ctx))
        if hasattr(command, "list_commands"):
            found.extend(_commands(command, sub_ctx))
    return found


REFERENCE_MARKER = "<!-- readme: cli-reference (generated from the Typer app below) -->"
"""The line of docs/cli.md after which the page is ``cli_reference()``."""


def with_reference(page: str) -> str:
    """docs/cli.md's hand-written part, the marker, and the generated reference."""
    return page.split(REFERENCE_MARKER)[0] + REFERENCE_MARKER + "\n\n" + cli_reference()


def cli_reference() -> str:
    """docs/cli.md's reference part: every command and option, from the Typer app's click
    commands."""
    import typer

    from ctxledger.cli import app

    root = typer.main.get_command(app)
    ctx = root.context_class(root, info_name="ctxledger")
    commands_found = _commands(root, ctx)
    out = ["## Reference", "",
           "Generated from the command line's own definitions by `scripts/readme.py`",
           "(`make readme`); a test fails when it is stale.", "",
           "```text", _usage(root, ctx), "```", "", _help(root), "",
           "## Global options", "", *_params_table(root, ctx),
           "## Commands", "", "| command | what it does |", "|---|---|"]
    for command, sub_ctx in commands_found:
        anchor = sub_ctx.command_path.replace(" ", "-")
        first = _help(command).split("\n\n")[0]
        out.append(f"| [`{sub_ctx.command_path}`](#{anchor}) | {_cell(first)} |")
    out.append("")
    for command, sub_ctx in commands_found:
        out += [f"## {sub_ctx.command_path}", "", "```text", _usage(command, sub_ctx),
                "```", "", _help(command), "", *_params_table(command, sub_ctx)]
    return "\n".join(out).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    """Rewrite the pages' outputs and docs/cli.md, or with ``--check`` report stale ones."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="change nothing; exit 1 with a diff when anything is stale")
    args = parser.parse_args(argv)
    stale: list[tuple[Path, str, str]] = []
    with tempfile.TemporaryDirectory(prefix="ctxledger-readme-") as name:
        for page in pages():
            current = page.read_text(encoding="utf-8")
            fresh = regenerate(current, page, Path(name))
            if page == CLI_REFERENCE:
                fresh = with_reference(fresh)
            if masked(fresh) != masked(current):
                stale.append((page, current, fresh))
    if not stale:
        print("outputs are current: README.md, docs/*.md and docs/cli.md")
        return 0
    if args.check:
        for page, current, fresh in stale:
            sys.stdout.writelines(difflib.unified_diff(
                current.splitlines(keepends=True), fresh.splitlines(keepends=True),
                shown(page), f"{shown(page)} (regenerated)"))
        names = ", ".join(shown(page) for page, _, _ in stale)
        print(f"\nstale: {names}; run 'make readme'")
        return 1
    for page, _, fresh in stale:
        page.write_text(fresh, encoding="utf-8")
    print("regenerated: " + ", ".join(shown(page) for page, _, _ in stale))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
