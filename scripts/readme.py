"""Regenerate (or check) the real outputs shown in README.md, so they cannot go stale.

    python scripts/readme.py            # rewrite the outputs in README.md
    python scripts/readme.py --check    # exit 1 and show a diff if any output is stale

Three markers, each on the line right before a fenced block:

- ``<!-- readme: file NAME -->``: the block is written to the file NAME first.
- ``<!-- readme: shell -->``: the block's ``$ `` lines are commands (a line ending in
  ``\\`` continues on the next). They run with bash, in order, and the block becomes each
  command followed by what it printed (stdout and stderr).
- ``<!-- readme: python-output -->``: the block becomes what the nearest ``python`` block
  above it printed.

Shell blocks and files share one temporary folder, top to bottom, so a database that an
earlier block creates is there for a later one; Python blocks run in a subfolder of their
own. ``ctxledger`` is the one next to this Python, and the environment is fixed (120
columns, no colour, no ``CTXLEDGER_DB``). What still differs between two runs (generated
event ids, hashes over recorded times, the times themselves, elapsed seconds) is masked
when ``--check`` compares, and written as it came out otherwise.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
MARKER = re.compile(r"^<!-- readme: (shell|python-output|file) ?([^ ]*) -->$")
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
                "HOME": str(folder), "PYTHONHASHSEED": "0"})
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
        shown = command.split("\n")
        result.append(f"$ {shown[0]}")
        result.extend(shown[1:])
        # One stream for both, interleaved as a terminal shows them.
        done = subprocess.run(["bash", "-c", command], cwd=folder, env=environment(folder),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=TIMEOUT, check=False)
        output = done.stdout.rstrip("\n")
        result.extend(line.rstrip() for line in output.split("\n") if output)
    return result


def run_python(code: list[str], folder: Path) -> list[str]:
    """What the Python code printed."""
    done = subprocess.run([sys.executable, "-c", "\n".join(code)], cwd=folder,
                          env=environment(folder), capture_output=True, text=True,
                          timeout=TIMEOUT, check=False)
    if done.returncode != 0:
        raise SystemExit(f"a python block of README.md failed:\n{done.stderr}")
    return [line.rstrip() for line in done.stdout.rstrip("\n").split("\n")]


def regenerate(text: str) -> str:
    """``text`` with every marked block's output produced again."""
    lines = text.split("\n")
    replacements: list[tuple[Block, list[str]]] = []
    with tempfile.TemporaryDirectory(prefix="ctxledger-readme-") as name:
        folder = Path(name)
        python_folder = folder / "python"
        python_folder.mkdir()
        last_python: list[str] | None = None
        for block in blocks(lines):
            if block.language == "python":
                last_python = block.body
            if block.kind == "file":
                (folder / block.argument).write_text("\n".join(block.body) + "\n",
                                                     encoding="utf-8")
            elif block.kind == "shell":
                replacements.append((block, run_shell(block.body, folder)))
            elif block.kind == "python-output":
                if last_python is None:
                    raise SystemExit(f"README.md line {block.start + 1}: python-output "
                                     "with no python block above it")
                replacements.append((block, run_python(last_python, python_folder)))
    for block, body in reversed(replacements):
        lines[block.start + 1:block.end] = body
    return "\n".join(lines)


def masked(text: str) -> str:
    """``text`` with what differs between runs replaced by placeholders."""
    for pattern, placeholder in VOLATILE:
        text = pattern.sub(placeholder, text)
    return text


def main(argv: list[str] | None = None) -> int:
    """Rewrite README.md's outputs, or with ``--check`` report stale ones (exit 1)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="change nothing; exit 1 with a diff when an output is stale")
    args = parser.parse_args(argv)
    current = README.read_text(encoding="utf-8")
    fresh = regenerate(current)
    if masked(fresh) == masked(current):
        print("README.md outputs are current")
        return 0
    if args.check:
        sys.stdout.writelines(difflib.unified_diff(
            current.splitlines(keepends=True), fresh.splitlines(keepends=True),
            "README.md", "README.md (regenerated)"))
        print("\nREADME.md outputs are stale: run 'make readme'")
        return 1
    README.write_text(fresh, encoding="utf-8")
    print("README.md outputs regenerated")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
