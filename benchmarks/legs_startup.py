"""Start-up leg: the wall time of a whole ``ctxledger`` process.

Every CLI call pays for the interpreter and the imports before it does any work, so the
figure is the process as a user sees it: ``--version``, ``--help``, and ``state`` on a
small database (the example sessions, 152 events), each the median of 10 runs (3 with
``--quick``), run with a fixed environment (no ``CTXLEDGER_DB``, no colour), so the
figure is the one a shell would see.

The judged figures are those of the console script of ctxledger's wheel, installed alone
into a fresh venv (``legs_hook.wheel_install``): what a user installs. The editable
checkout's console script is measured beside it and reported: its interpreter start also
runs the editable install's finder (hatchling's ``editables``), a cost only a developer's
checkout pays. Its bytecode is compiled first, as installing a wheel does: with
``PYTHONDONTWRITEBYTECODE=1`` every call would otherwise compile ctxledger's own modules
from source (about 50 ms).
"""

from __future__ import annotations

import compileall
import os
import subprocess
import sys
import time
from pathlib import Path

from registry import AtMost, Comparison, Context, Measure, Reported, leg

from ctxledger.io._examples import EXAMPLES_DIR, ScriptedClock, load_examples, read_examples

FULL_RUNS = 10
QUICK_RUNS = 3
CLI = Path(sys.executable).with_name("ctxledger")
SESSION = "acme-billing-2025-05-11"
"""A session of the examples; its state has tools, settings and a document."""


def _environment() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("CTXLEDGER_")}
    env.update({"NO_COLOR": "1", "COLUMNS": "120"})
    return env


def wall_ms(args: list[str], runs: int, *, program: Path = CLI) -> Measure:
    """Median wall time of ``runs`` processes ``PROGRAM ARGS`` (the ``ctxledger`` console
    script unless told); each must exit 0."""
    values: list[float] = []
    env = _environment()
    for _ in range(runs):
        started = time.perf_counter()
        done = subprocess.run([str(program), *args], capture_output=True, env=env,
                              check=False, timeout=120)
        values.append((time.perf_counter() - started) * 1000)
        if done.returncode != 0:
            raise RuntimeError(f"{program.name} {' '.join(args)} failed: "
                               f"{done.stderr[-1000:]!r}")
    return Measure.median_of(values, "ms")


def compile_bytecode() -> None:
    """Write the ``.pyc`` files of ctxledger's modules, as installing a wheel does."""
    import ctxledger

    # In a checkout the package's path also holds the root, where only these are its own.
    for entry in map(Path, ctxledger.__path__):
        own = [entry] if (entry / "__init__.py").is_file() else [
            entry / name for name in ("store", "projections", "assembler", "migrations")]
        for folder in own:
            compileall.compile_dir(folder, quiet=1)


def small_database(directory: Path) -> str:
    """The example sessions in a SQLite file, each event at its own time."""
    from ctxledger import Ledger

    url = f"sqlite:///{directory / 'small.db'}"
    examples = read_examples(sorted(EXAMPLES_DIR.glob("*.jsonl")))
    clock = ScriptedClock(examples[0].at)
    with Ledger.open(url, clock=clock) as ledger:
        load_examples(ledger, clock, examples)
    return url


@leg("startup", "CLI start-up: process wall time of ctxledger --version, --help, state")
def startup(ctx: Context) -> list[Comparison]:
    """Median process wall time of three calls a user makes all day."""
    from legs_hook import wheel_install  # here: legs_hook imports this module

    runs = QUICK_RUNS if ctx.settings.quick else FULL_RUNS
    with ctx.fresh_dir("startup") as directory:
        url = small_database(directory)
        compile_bytecode()
        wheel_cli = wheel_install(directory) / "ctxledger"
        rows = [
            ("ctxledger --version", ["--version"], 150.0),
            ("ctxledger --help", ["--help"], 150.0),
            ("ctxledger state on a small database", ["state", SESSION, "--db", url], 400.0),
        ]
        found: list[Comparison] = []
        for program, judged, where in ((wheel_cli, True, "the wheel, in a fresh venv"),
                                       (CLI, False, "the editable checkout")):
            wall_ms(["state", SESSION, "--db", url], 1, program=program)  # untimed: caches
            found += [Comparison("startup", f"{label} ({where})",
                                 wall_ms(args, runs, program=program), None, None,
                                 AtMost(ceiling, "ms") if judged else Reported(),
                                 f"process wall time, median of {runs}")
                      for label, args, ceiling in rows]
        # The floor any CLI on these libraries pays, measured alongside: it moves with the
        # machine (a slower moment lifts every row by about as much).
        floor = wall_ms(["-c", "import sqlalchemy, pydantic"], runs,
                        program=Path(sys.executable))
        found.append(Comparison("startup", "floor: python -c 'import sqlalchemy, pydantic'",
                                floor, None, None, Reported(),
                                "the same Python, median of the same number of runs"))
        return found

