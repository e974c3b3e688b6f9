"""Every file the command line reads goes through one bounded reader
(``ctxledger.io._bounded``): a size limit, a JSON nesting limit and integers checked
before conversion, each a one-line error naming the limit, exit 1, nothing written, on
SQLite and PostgreSQL. Through the Typer app the CLI tests use, and the library calls the
HTTP and MCP paths share."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest
from helpers.assertions import one_error_line
from typer.testing import CliRunner, Result

from ctxledger import Ledger
from ctxledger._config import ENV_VAR
from ctxledger.cli import app
from ctxledger.cli._errors import DEBUG_ENV_VAR
from ctxledger.io._bounded import (
    MAX_BYTES_ENV,
    MAX_DEPTH_ENV,
    BoundedInputError,
    InputLimits,
    loads_bounded,
    read_bounded,
)
from ctxledger.io._examples import EXAMPLES_DIR
from ctxledger.store.character_card import CardFileError

CARD = EXAMPLES_DIR / "cards" / "wren-halloway.json"
SCOPE = "tavern"
DEEP = 5000
"""Past Python's recursion limit: the JSON parser itself would raise RecursionError."""


def _deep(levels: int = DEEP) -> str:
    return "[" * levels + "]" * levels


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner(env={ENV_VAR: None, DEBUG_ENV_VAR: None, MAX_BYTES_ENV: None,
                          MAX_DEPTH_ENV: None, "COLUMNS": "160"})


def _cli(runner: CliRunner, url: str, *args: str, stdin: str | bytes | None = None,
         env: dict[str, str] | None = None) -> Result:
    return runner.invoke(app, ["--db", url, *args], input=stdin, env=env)


def _head(url: str) -> int:
    with Ledger.open(url, load_vocabulary=False) as ledger:
        return ledger.head()


@pytest.fixture
def started(runner: CliRunner, db_url: str) -> int:
    """A database holding one card already: a refused file must leave its head."""
    assert _cli(runner, db_url, "card", "import", str(CARD), "--scope", SCOPE).exit_code == 0
    return _head(db_url)


def _write(path: Path, text: str | bytes) -> Path:
    if isinstance(text, str):
        path.write_text(text, encoding="utf-8")
    else:
        path.write_bytes(text)
    return path


def test_deeply_nested_card_and_lorebook_files(runner: CliRunner, db_url: str,
                                               started: int, tmp_path: Path) -> None:
    card = _write(tmp_path / "card.json", '{"name": "x", "data": ' + _deep() + "}")
    one_error_line(_cli(runner, db_url, "card", "import", str(card), "--scope", SCOPE),
                   "card.json: JSON nested deeper than 100 levels (CTXLEDGER_MAX_INPUT_DEPTH)")
    book = _write(tmp_path / "book.json", '{"entries": ' + _deep() + "}")
    one_error_line(_cli(runner, db_url, "lorebook", "import", str(book), "--scope", SCOPE),
                   "book.json: JSON nested deeper than 100 levels")
    # Below Python's own limit, past ours: the same verdict, not a slow walk of the store.
    shallow = _write(tmp_path / "mid.json", '{"entries": ' + _deep(150) + "}")
    one_error_line(_cli(runner, db_url, "lorebook", "import", str(shallow), "--scope",
                        SCOPE), "mid.json: JSON nested deeper than 100 levels")
    # The limit is the user's to raise: then the store's own 64 levels answer.
    raised = _cli(runner, db_url, "lorebook", "import", str(shallow), "--scope", SCOPE,
                  env={MAX_DEPTH_ENV: "1000"})
    one_error_line(raised, "nested deeper than 64 levels")
    assert _head(db_url) == started


def test_a_huge_world_info_uid(runner: CliRunner, db_url: str, started: int,
                               tmp_path: Path) -> None:
    digits = "7" * 4300
    value = _write(tmp_path / "wi.json",
                   '{"entries": {"0": {"uid": ' + digits + ', "key": ["a"], "content": "x"}}}')
    line = one_error_line(
        _cli(runner, db_url, "lorebook", "import", str(value), "--scope", SCOPE),
        "wi.json: the number 77777777777777777777... (4300 digits) is out of range")
    assert len(line) < 200
    assert _head(db_url) == started
    # As a key (uids key the entries), thousands of digits sort without conversion.
    keyed = _write(tmp_path / "keys.json", json.dumps({"entries": {
        "1" * 4301: {"key": ["b"], "content": "last"},
        "9": {"key": ["a"], "content": "first"}}}))
    done = _cli(runner, db_url, "lorebook", "import", str(keyed), "--scope", SCOPE)
    assert done.exit_code == 0, done.stderr
    with Ledger.open(db_url, load_vocabulary=False) as ledger:
        book = ledger.events(f"scope:{SCOPE}")[-1].data["book"]
    assert [entry["content"] for entry in book["entries"]] == ["first", "last"]


@pytest.mark.parametrize("trust", [True, False])
def test_an_at_past_the_calendar_names_the_event(runner: CliRunner, db_url: str,
                                                 started: int, trust: bool) -> None:
    body = "\n".join(json.dumps(line) for line in (
        {"stream": "s1", "type": "session.started", "data": {},
         "at": "2025-01-01T00:00:00Z"},
        {"stream": "s1", "type": "message.appended",
         "data": {"role": "user", "content": "hi"}, "at": "9999-12-31T23:59:59-23:59"},
    )) + "\n"
    args = ["import", "-", *(["--trust-timestamps"] if trust else [])]
    one_error_line(_cli(runner, db_url, *args, stdin=body),
                   "line 2: 'at' '9999-12-31T23:59:59-23:59' of the message.appended event"
                   " of stream 's1' is outside 1900-01-01 .. 9999-01-01")
    assert _head(db_url) == started


def test_jsonl_and_chat_inputs(runner: CliRunner, db_url: str, started: int,
                               tmp_path: Path) -> None:
    deep_line = _write(tmp_path / "deep.jsonl", '{"type": "x", "data": ' + _deep() + "}\n")
    one_error_line(_cli(runner, db_url, "append", "s1", "-f", str(deep_line)),
                   "line 1: JSON nested deeper than 100 levels")
    one_error_line(_cli(runner, db_url, "import", str(deep_line)),
                   "line 1: JSON nested deeper than 100 levels")
    big = '[{"role": "user", "content": "hi", "n": ' + "9" * 30 + "}]"
    one_error_line(_cli(runner, db_url, "append-messages", "s1", "-", stdin=big),
                   "input: the number 99999999999999999999... (30 digits) is out of"
                   " range")
    one_error_line(_cli(runner, db_url, "append-messages", "s1", "-", stdin=_deep()),
                   "input: JSON nested deeper than 100 levels")
    assert _head(db_url) == started


def test_the_size_limit(runner: CliRunner, db_url: str, started: int,
                        tmp_path: Path) -> None:
    small = {MAX_BYTES_ENV: "1024"}
    lines = "".join(json.dumps({"stream": f"n{index}", "type": "session.started",
                                "data": {}}) + "\n" for index in range(40))
    big = _write(tmp_path / "big.jsonl", lines)
    one_error_line(_cli(runner, db_url, "import", str(big), env=small),
                   f"cannot read {big}: the file is larger than 1 KiB (CTXLEDGER_MAX_INPUT_BYTES)")
    one_error_line(_cli(runner, db_url, "import", "-", stdin=lines, env=small),
                   "stdin: the input is larger than 1 KiB (CTXLEDGER_MAX_INPUT_BYTES)")
    one_error_line(_cli(runner, db_url, "card", "import", str(CARD), "--scope", SCOPE,
                        env={MAX_BYTES_ENV: "100"}),
                   "wren-halloway.json: the file is larger than 100 bytes")
    policy = _write(tmp_path / "policy.json", '{"profile": "card"}' + " " * 2000)
    one_error_line(_cli(runner, db_url, "assemble", "s1", "--policy", str(policy),
                        env=small), "policy.json", "larger than 1 KiB")
    deep_policy = _write(tmp_path / "deep-policy.json", '{"profile": ' + _deep() + "}")
    one_error_line(_cli(runner, db_url, "assemble", "s1", "--policy", str(deep_policy)),
                   "deep-policy.json", "nested deeper than 100 levels")
    one_error_line(_cli(runner, db_url, "import", str(big), env={MAX_BYTES_ENV: "lots"}),
                   "$CTXLEDGER_MAX_INPUT_BYTES must be a positive whole number, not 'lots'")
    assert _head(db_url) == started
    # Within the limit it reads as before.
    assert _cli(runner, db_url, "import", str(big),
                env={MAX_BYTES_ENV: "4096"}).exit_code == 0


def test_dev_zero_stops_at_the_limit(runner: CliRunner, db_url: str, started: int) -> None:
    result = _cli(runner, db_url, "card", "import", "/dev/zero", "--scope", SCOPE)
    one_error_line(result, "zero: the file is larger than 64 MiB (CTXLEDGER_MAX_INPUT_BYTES)")
    assert _head(db_url) == started


def test_a_fifo_that_never_ends_is_cut_at_the_limit(runner: CliRunner, db_url: str,
                                                     started: int, tmp_path: Path) -> None:
    fifo = tmp_path / "events.fifo"
    os.mkfifo(fifo)
    sent: list[int] = []

    def endless() -> None:
        with open(fifo, "wb") as out:
            try:
                while True:
                    out.write(b"x" * 65536)
                    sent.append(65536)
            except BrokenPipeError:
                return
    writer = threading.Thread(target=endless, daemon=True)
    writer.start()
    one_error_line(_cli(runner, db_url, "import", str(fifo), env={MAX_BYTES_ENV: "1048576"}),
                   "events.fifo: the file is larger than 1 MiB (CTXLEDGER_MAX_INPUT_BYTES)")
    writer.join(timeout=60)
    assert not writer.is_alive()
    # The writer was stopped by the reader closing, a little past the limit (pipe buffer).
    assert sum(sent) < 4 * 1048576
    assert _head(db_url) == started


# -- the library's own calls (what HTTP and MCP share) -------------------------------------


def test_the_ledger_refuses_a_deep_card_file_in_one_line(
        ledger: Ledger, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    card = _write(tmp_path / "card.json", '{"name": ' + _deep() + "}")
    before = ledger.head()
    with pytest.raises(CardFileError) as caught:
        ledger.import_card(card, scope=SCOPE)
    assert str(caught.value) == ("card.json: JSON nested deeper than 100 levels"
                                 " (CTXLEDGER_MAX_INPUT_DEPTH)")
    number = _write(tmp_path / "n.json", '{"name": 1' + "0" * 40 + "}")
    with pytest.raises(CardFileError, match=r"^n.json: the number 1000.* is out of range"):
        ledger.import_card(number, scope=SCOPE)
    monkeypatch.setenv(MAX_BYTES_ENV, "1024")
    with pytest.raises(CardFileError, match=r"^input: the input is larger than 1 KiB"):
        ledger.import_card(b"{" + b" " * 2048 + b"}", scope=SCOPE)
    assert ledger.head() == before


@pytest.mark.parametrize(("text", "needle"), [
    ("[" * 101 + "]" * 101, "x: JSON nested deeper than 100 levels"),
    ('{"a": ' * 3000 + "1" + "}" * 3000, "x: JSON nested deeper than 100 levels"),
    ("-" + "1" * 20, "x: the number -11111111111111111111 (20 digits) is out of range"),
])
def test_loads_bounded_refuses(text: str, needle: str) -> None:
    with pytest.raises(BoundedInputError) as caught:
        loads_bounded(text, "x", InputLimits())
    assert str(caught.value).startswith(needle)


def test_loads_bounded_keeps_what_fits() -> None:
    value: Any = loads_bounded("[" * 100 + "]" * 100, "x", InputLimits())
    assert isinstance(value, list)
    assert loads_bounded('{"n": -9223372036854775808, "s": "[[[["}', "x") == {
        "n": -9223372036854775808, "s": "[[[["}
    with pytest.raises(json.JSONDecodeError):
        loads_bounded("{", "x")


def test_read_bounded_refuses_a_large_file_by_its_size(tmp_path: Path) -> None:
    path = _write(tmp_path / "f.bin", b"a" * 2049)
    with pytest.raises(BoundedInputError, match=r"^f: the file is larger than 2 KiB"):
        read_bounded(path, "f", InputLimits(max_bytes=2048))
    assert read_bounded(path, "f", InputLimits(max_bytes=2049)) == b"a" * 2049
    with pytest.raises(BoundedInputError, match=r"^gone: no such file$"):
        read_bounded(tmp_path / "gone", "gone")


def test_an_anchor_file_is_read_within_the_limits(runner: CliRunner, db_url: str,
                                                  started: int, tmp_path: Path) -> None:
    big = _write(tmp_path / "anchor.txt", "x" * 4096 + "\n")
    one_error_line(_cli(runner, db_url, "verify", "--anchor", str(big),
                        env={MAX_BYTES_ENV: "1024"}),
                   f"cannot read anchor file {str(big)!r}: the file is larger than 1 KiB")
    deep = _write(tmp_path / "deep.txt", '{"a": ' * 3000 + "1" + "}" * 3000 + "\n")
    one_error_line(_cli(runner, db_url, "verify", "--anchor", str(deep)),
                   "not an anchor line: it is nested too deeply")
    one_error_line(_cli(runner, db_url, "verify", "--anchor", "{" + "[" * 5000),
                   "not an anchor line")
    assert _head(db_url) == started
