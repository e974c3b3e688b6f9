"""Character card files in and out: JSON and PNG cards read (``ctxledger.io._card_files``),
imported and exported through ``Ledger`` and the ``card``/``lorebook`` commands, scope
cards under sessions, and bad files refused in one line with nothing written, on SQLite
and PostgreSQL."""

from __future__ import annotations

import base64
import copy
import io
import json
import struct
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers.assertions import one_error_line
from PIL import Image
from PIL.PngImagePlugin import PngInfo
from typer.testing import CliRunner, Result

from ctxledger import EventValidationError, InvalidArgument, Ledger
from ctxledger._config import ENV_VAR
from ctxledger.cli import app
from ctxledger.cli._errors import DEBUG_ENV_VAR
from ctxledger.io._card_files import read_card, read_lorebook, world_info_book
from ctxledger.io._examples import EXAMPLES_DIR
from ctxledger.projections.session_view import ViewRequest
from ctxledger.store.character_card import CardFileError

Run = Callable[..., Result]
SCOPE = "tavern"
CARD_EVENT_ID = "6f1c2a3e-9b7d-4e21-8c55-0a1b2c3d4e5f"
EXAMPLE = EXAMPLES_DIR / "cards" / "wren-halloway"

BOOK: dict[str, Any] = {
    "name": "Harbour",
    "scan_depth": 3,
    "extensions": {"sillytavern": {"kept": True}},
    "entries": [
        {"keys": ["harbour"], "content": "{{char}} knows every mooring.", "extensions": {},
         "enabled": True, "insertion_order": 100, "position": "before_char", "id": 0},
        {"keys": ["storm"], "secondary_keys": ["night"], "selective": True,
         "content": "Storms at night frighten {{user}}.", "enabled": True,
         "insertion_order": 90, "extensions": {"position": 4, "depth": 2, "role": 0},
         "probability": 100},
    ],
}
V1: dict[str, Any] = {
    "name": "Pell", "description": "A ferryman.", "personality": "quiet",
    "scenario": "", "first_mes": "Fare, please.", "mes_example": "<START>\n{{char}}: Hm.",
}
V2: dict[str, Any] = {
    # SillyTavern writes the V1 fields again at the top level, and its own bookkeeping.
    "name": "Mira", "description": "Harbour pilot.", "personality": "brisk",
    "scenario": "At the quay.", "first_mes": "Ropes!", "mes_example": "",
    "creatorcomment": "", "avatar": "none", "chat": "Mira - 2024-5-1 @12h 00m 00s 000ms",
    "talkativeness": "0.5", "fav": False, "tags": ["sea"],
    "create_date": "2024-5-1 @12h 00m 00s 000ms",
    "spec": "chara_card_v2", "spec_version": "2.0",
    "data": {
        "name": "Mira", "description": "Harbour pilot.", "personality": "brisk",
        "scenario": "At the quay.", "first_mes": "Ropes!", "mes_example": "",
        "creator_notes": "", "system_prompt": "{{original}} Be brief.",
        "post_history_instructions": "", "tags": ["sea"], "creator": "someone",
        "character_version": "1", "alternate_greetings": ["Tide's turning."],
        "character_book": BOOK,
        "extensions": {"talkativeness": "0.5", "fav": False, "world": "",
                       "depth_prompt": {"prompt": "", "depth": 4, "role": "system"}},
    },
}
V3: dict[str, Any] = {
    "spec": "chara_card_v3", "spec_version": "3.0",
    "data": {
        "name": "Iskra", "nickname": "Isk", "description": "A lamp-lighter.",
        "personality": "", "scenario": "", "first_mes": "Light?", "mes_example": "",
        "creator_notes": "", "system_prompt": "", "post_history_instructions": "",
        "alternate_greetings": [], "group_only_greetings": ["All of you, then."],
        "tags": [], "creator": "", "character_version": "",
        "creator_notes_multilingual": {"en": "notes"}, "source": ["local"],
        "assets": [{"type": "icon", "uri": "ccdefault:", "name": "main", "ext": "png"}],
        "creation_date": 1700000000, "modification_date": 1700000500,
        "character_book": BOOK, "extensions": {"x": {"y": [1, 2]}},
        "a_key_no_spec_names": 7,
    },
}
CARDS = {"v1": V1, "v2": V2, "v3": V3}


def _b64(card: object) -> str:
    return base64.b64encode(json.dumps(card).encode("utf-8")).decode("ascii")


def _png(*chunks: tuple[str, str, str]) -> bytes:
    """A real 8x8 PNG (Pillow) with text chunks: ``(kind, keyword, text)``, kind one of
    ``tEXt``, ``zTXt``, ``iTXt``."""
    info = PngInfo()
    for kind, keyword, text in chunks:
        if kind == "iTXt":
            info.add_itxt(keyword, text)
        else:
            info.add_text(keyword, text, zip=kind == "zTXt")
    out = io.BytesIO()
    Image.new("RGB", (8, 8), (200, 30, 30)).save(out, format="PNG", pnginfo=info)
    return out.getvalue()


def _chunk(kind: bytes, data: bytes) -> bytes:
    return (struct.pack(">I", len(data)) + kind + data
            + struct.pack(">I", zlib.crc32(kind + data)))


@pytest.fixture
def runner() -> CliRunner:
    """A runner whose environment never points at a real ledger by accident."""
    return CliRunner(env={ENV_VAR: None, DEBUG_ENV_VAR: None, "COLUMNS": "160"})


def _cli(runner: CliRunner, url: str) -> Run:
    def run(*args: str) -> Result:
        return runner.invoke(app, ["--db", url, *args])
    return run


def _start(ledger: Ledger, *sessions: str) -> None:
    for session in sessions:
        ledger.append(session, {"type": "session.started", "data": {"scope": SCOPE}})


# -- reading files ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["tEXt", "zTXt", "iTXt"])
def test_a_png_card_is_read_from_any_text_chunk(kind: str) -> None:
    assert read_card(_png((kind, "chara", _b64(V2)))) == V2


def test_ccv3_wins_over_chara_in_either_order() -> None:
    for chunks in ((("tEXt", "chara", _b64(V2)), ("tEXt", "ccv3", _b64(V3))),
                   (("tEXt", "ccv3", _b64(V3)), ("iTXt", "chara", _b64(V2)))):
        assert read_card(_png(*chunks)) == V3
    assert read_card(_png(("tEXt", "ccv3", _b64(V3)))) == V3


def test_the_signature_decides_not_the_extension(tmp_path: Path) -> None:
    png_named_json = tmp_path / "card.json"
    png_named_json.write_bytes(_png(("tEXt", "chara", _b64(V1))))
    assert read_card(png_named_json) == V1
    json_named_png = tmp_path / "card.png"
    json_named_png.write_text(json.dumps(V1))
    with pytest.raises(CardFileError, match=r"^card.png: not a PNG \(bad signature\)$"):
        read_card(json_named_png)


def test_a_text_chunk_after_the_image_data_is_found() -> None:
    # SillyTavern writes its chunk just before IEND, after IDAT.
    raw = _png()
    iend = raw.rindex(b"IEND") - 4
    moved = raw[:iend] + _chunk(b"tEXt", b"chara\0" + _b64(V2).encode()) + raw[iend:]
    assert read_card(moved) == V2


def test_the_example_png_is_the_example_json() -> None:
    card = read_card(EXAMPLE.with_suffix(".png"))
    assert card == json.loads(EXAMPLE.with_suffix(".json").read_text(encoding="utf-8"))
    book = card["data"]["character_book"]["entries"]
    assert {entry["position"] for entry in book} == {"before_char", "after_char"}
    assert any(entry.get("constant") for entry in book)
    assert any(not entry["enabled"] for entry in book)
    assert any(entry.get("selective") and entry.get("secondary_keys") for entry in book)
    assert any(entry["extensions"].get("position") == 4 for entry in book)


@pytest.mark.parametrize(("raw", "needle"), [
    (b"\x89PNX\r\n\x1a\n", "not a PNG (bad signature)"),
    (b'{"a": 1,\n "b": }', "not JSON: Expecting value at line 2 column 7"),
    (b"[1, 2]", "not a JSON object (a list)"),
    (b'{"a": NaN}', "not JSON: NaN is not a JSON value"),
    (b'{"name": "\xff"}', "not UTF-8 (byte 0xff at offset 10)"),
    (b"", "not JSON: Expecting value at line 1 column 1"),
])
def test_bad_card_bytes_are_one_line_errors(raw: bytes, needle: str) -> None:
    with pytest.raises(CardFileError) as caught:
        read_card(raw, name="x.card")
    assert str(caught.value) == f"x.card: {needle}"


def test_bad_pngs_are_one_line_errors(tmp_path: Path) -> None:
    good = _png(("tEXt", "chara", _b64(V1)))
    at = good.index(b"tEXt") + 4
    cases = {
        "no card chunk": (_png(("tEXt", "Comment", "hello")),
                          "no 'chara' or 'ccv3' text chunk: not a character card"),
        "bad base64": (_png(("tEXt", "chara", "not*base64!")),
                       "the 'chara' text chunk is not valid base64"),
        "not JSON inside": (_png(("tEXt", "chara", base64.b64encode(b"{").decode())),
                            "not JSON: Expecting property name enclosed in double quotes"),
        "crc": (good[:at] + b"X" + good[at + 1:], "corrupt PNG: chunk 'tEXt' at offset"),
        "truncated": (good[:at + 10], "truncated PNG: chunk 'tEXt' at offset"),
        "no IEND": (good[:good.rindex(b"IEND") - 4], "truncated PNG: it ends at offset"),
    }
    for what, (raw, needle) in cases.items():
        path = tmp_path / "bad.png"
        path.write_bytes(raw)
        with pytest.raises(CardFileError) as caught:
            read_card(path)
        message = str(caught.value)
        assert message.startswith("bad.png: ") and needle in message, (what, message)
        assert "\n" not in message
    with pytest.raises(CardFileError, match=r"^gone.json: no such file$"):
        read_card(tmp_path / "gone.json")


def test_world_info_becomes_a_v2_book() -> None:
    world = {"entries": {
        "10": {"uid": 10, "key": ["b"], "keysecondary": [], "comment": "late",
               "content": "B", "constant": False, "selective": False, "order": 5,
               "position": 4, "disable": True, "depth": 2, "role": 1,
               "excludeRecursion": True},
        "2": {"uid": 2, "key": ["a", "aa"], "keysecondary": ["x"], "comment": "first",
              "content": "A", "constant": True, "selective": True, "order": 100,
              "position": 0, "disable": False, "depth": 4, "role": None,
              "extensions": {"kept": 1}},
    }, "originalData": {"name": "W"}}
    book = read_lorebook(json.dumps(world).encode())
    assert book == world_info_book(world)
    first, second = book["entries"]  # by uid as a number: 2 before 10
    assert first == {"id": 2, "keys": ["a", "aa"], "secondary_keys": ["x"],
                     "comment": "first", "content": "A", "constant": True,
                     "selective": True, "insertion_order": 100, "position": "before_char",
                     "enabled": True,
                     "extensions": {"kept": 1, "position": 0, "depth": 4, "role": None}}
    assert second["enabled"] is False and second["position"] == "after_char"
    assert second["extensions"] == {"position": 4, "depth": 2, "role": 1,
                                    "excludeRecursion": True}
    assert book["extensions"] == {"originalData": {"name": "W"}}
    # A V2 book and a lorebook_v3 file are kept as written.
    assert read_lorebook(BOOK) == BOOK
    v3 = {"spec": "lorebook_v3", "data": BOOK}
    assert read_lorebook(json.dumps(v3).encode()) == v3


# -- the API ------------------------------------------------------------------------------


@pytest.mark.parametrize("version", sorted(CARDS))
def test_import_then_export_gives_the_file_back(ledger: Ledger, tmp_path: Path,
                                                version: str) -> None:
    card = CARDS[version]
    path = tmp_path / f"{version}.json"
    path.write_text(json.dumps(card, indent=1), encoding="utf-8")
    _start(ledger, "s1")
    ledger.import_card(path, session="s1")
    ledger.import_card(_png(("tEXt", "chara", _b64(card))), scope=SCOPE)
    for exported in (ledger.export_card(session="s1"), ledger.export_card(scope=SCOPE)):
        assert exported == card
        if "data" in card:
            assert exported["data"]["extensions"] == card["data"]["extensions"]


def test_a_mapping_imports_and_an_event_id_makes_it_idempotent(ledger: Ledger) -> None:
    _start(ledger, "s1")
    first = ledger.import_card(copy.deepcopy(V3), session="s1", event_id=CARD_EVENT_ID)
    again = ledger.import_card(copy.deepcopy(V3), session="s1", event_id=CARD_EVENT_ID)
    assert again.duplicate and again.positions == first.positions
    assert ledger.export_card(session="s1") == V3


def test_a_scope_card_under_the_scope_sessions(ledger: Ledger) -> None:
    _start(ledger, "plain", "own", "merged")
    ledger.import_card(copy.deepcopy(V2), scope=SCOPE)
    # No card of its own: the scope's.
    assert ledger.export_card(session="plain") == V2
    assert ledger.view("plain").card["system_prompt"] == "{{original}} Be brief."
    # A whole card of its own hides every scope field.
    ledger.import_card(copy.deepcopy(V1), session="own")
    assert ledger.export_card(session="own") == V1
    own = ledger.view("own").card
    assert "system_prompt" not in own and "character_book" not in own
    # A merge of one field is laid over the scope's card.
    ledger.append("merged", {"type": "card.set", "data": {"name": "Mira the Younger"}})
    merged = ledger.export_card(session="merged")
    assert merged["data"] == {**V2["data"], "name": "Mira the Younger"}
    assert ledger.export_card(scope=SCOPE) == V2


def test_a_v1_card_replaces_a_whole_earlier_card(ledger: Ledger) -> None:
    # Only card.set's own field names: still a whole card, not a merge.
    _start(ledger, "s1")
    ledger.import_card(copy.deepcopy(V2), session="s1")
    ledger.import_card(copy.deepcopy(V1), session="s1")
    assert ledger.export_card(session="s1") == V1


def test_api_errors_write_nothing(ledger: Ledger) -> None:
    _start(ledger, "s1")
    head = ledger.head()
    with pytest.raises(CardFileError, match="not a character card"):
        ledger.import_card(_png(), session="s1")
    with pytest.raises(EventValidationError, match="tags"):
        ledger.import_card({**V2, "data": {**V2["data"], "tags": "sea"}}, session="s1")
    with pytest.raises(InvalidArgument, match="exactly one of session and scope"):
        ledger.import_card(V1, session="s1", scope=SCOPE)
    with pytest.raises(InvalidArgument, match="exactly one"):
        ledger.export_card()
    with pytest.raises(InvalidArgument, match="session 's1' has no card"):
        ledger.export_card(session="s1")
    with pytest.raises(InvalidArgument, match="unknown session 'nobody'"):
        ledger.export_card(session="nobody")
    with pytest.raises(InvalidArgument, match=f"scope '{SCOPE}' has no card"):
        ledger.export_card(scope=SCOPE)
    with pytest.raises(InvalidArgument, match="has no lorebook 'w'"):
        ledger.remove_lorebook(SCOPE, "w")
    assert ledger.head() == head


def test_lorebooks_set_and_removed(ledger: Ledger) -> None:
    _start(ledger, "s1")
    ledger.set_lorebook(SCOPE, "harbour", BOOK)
    world = {"entries": {"0": {"uid": 0, "key": ["k"], "content": "C", "order": 1,
                               "position": 1, "disable": False}}}
    ledger.set_lorebook(SCOPE, "world", json.dumps(world).encode())
    books = ledger.view("s1", ViewRequest(lorebooks=True)).lorebooks
    assert [(b.book_id, dict(b.book)) for b in books] == [("harbour", BOOK),
                                                          ("world", world_info_book(world))]
    ledger.remove_lorebook(SCOPE, "harbour")
    books = ledger.view("s1", ViewRequest(lorebooks=True)).lorebooks
    assert [b.book_id for b in books] == ["world"]


# -- the command line ---------------------------------------------------------------------


def test_cli_card_import_and_export(runner: CliRunner, db_url: str, tmp_path: Path) -> None:
    cli = _cli(runner, db_url)
    done = cli("card", "import", str(EXAMPLE.with_suffix(".png")), "--scope", SCOPE)
    assert done.exit_code == 0, done.stderr
    assert json.loads(done.stdout) == {"name": "Wren Halloway", "spec": "chara_card_v2",
                                       "lorebook_entries": 6, "stream": f"scope:{SCOPE}",
                                       "position": 1}
    path = tmp_path / "v3.json"
    path.write_text(json.dumps(V3), encoding="utf-8")
    done = cli("card", "import", str(path), "--session", "s1", "--format", "text")
    assert done.exit_code == 0, done.stderr
    assert done.stdout == ("card 'Iskra' (chara_card_v3, 2 lorebook entries) set on s1 at "
                           "position 2\n")
    out = tmp_path / "out.json"
    done = cli("card", "export", "--scope", SCOPE, "-o", str(out))
    assert done.exit_code == 0 and done.stdout == "", done.stderr
    assert json.loads(out.read_text(encoding="utf-8")) == json.loads(
        EXAMPLE.with_suffix(".json").read_text(encoding="utf-8"))
    done = runner.invoke(app, ["card", "export", "--session", "s1", "--db", db_url])
    assert done.exit_code == 0, done.stderr
    assert json.loads(done.stdout) == V3


def test_cli_lorebook_import_and_remove(runner: CliRunner, db_url: str,
                                        tmp_path: Path) -> None:
    cli = _cli(runner, db_url)
    path = tmp_path / "harbour-lore.json"
    path.write_text(json.dumps(BOOK), encoding="utf-8")
    done = cli("lorebook", "import", str(path), "--scope", SCOPE)
    assert done.exit_code == 0, done.stderr
    assert json.loads(done.stdout) == {"book_id": "harbour-lore", "entries": 2,
                                       "stream": f"scope:{SCOPE}", "position": 1}
    done = cli("lorebook", "import", str(path), "--scope", SCOPE, "--id", "other")
    assert done.exit_code == 0, done.stderr
    assert cli("lorebook", "remove", "harbour-lore", "--scope", SCOPE).exit_code == 0
    with Ledger.open(db_url, load_vocabulary=False) as ledger:
        _start(ledger, "s1")
        books = ledger.view("s1", ViewRequest(lorebooks=True)).lorebooks
        assert [(b.book_id, dict(b.book)) for b in books] == [("other", BOOK)]
        head = ledger.head()
    one_error_line(cli("lorebook", "remove", "harbour-lore", "--scope", SCOPE),
                   f"scope '{SCOPE}' has no lorebook 'harbour-lore'")
    bad = tmp_path / "bad-lore.json"
    bad.write_text(json.dumps({"entries": [{"keys": "k", "content": "c"}]}))
    one_error_line(cli("lorebook", "import", str(bad), "--scope", SCOPE),
                   "bad-lore.json: ", "entries.0.keys")
    with Ledger.open(db_url, load_vocabulary=False) as ledger:
        assert ledger.head() == head


def _bad_files(tmp_path: Path) -> list[tuple[Path, str]]:
    """Bad card files and what each one's error must say."""
    entry = {"keys": ["k"], "content": 5}
    cases: list[tuple[str, bytes, str]] = [
        ("fake.png", b"GIF89a....", "fake.png: not a PNG (bad signature)"),
        ("plain.png", _png(("tEXt", "Title", "x")),
         "plain.png: no 'chara' or 'ccv3' text chunk: not a character card"),
        ("b64.png", _png(("tEXt", "chara", "%%%")),
         "b64.png: the 'chara' text chunk is not valid base64"),
        ("spec.json", json.dumps({"spec": "chara_card_v9", "data": {}}).encode(),
         "spec.json: card.set: data: unknown card spec 'chara_card_v9'"),
        ("tags.json", json.dumps({**V2, "data": {**V2["data"], "tags": "sea"}}).encode(),
         "tags.json: card.set: tags: Input should be a valid list"),
        ("entry.json", json.dumps({**V3, "data": {**V3["data"], "character_book": {
            "entries": [entry]}}}).encode(),
         "entry.json: card.set: character_book: entries.0.content"),
        ("list.json", b"[]", "list.json: not a JSON object (a list)"),
    ]
    found = []
    for name, raw, needle in cases:
        path = tmp_path / name
        path.write_bytes(raw)
        found.append((path, needle))
    return found


@pytest.mark.postgres
def test_bad_files_get_the_same_one_line_verdict_on_both_backends(
        runner: CliRunner, sqlite_url: str, pg_url: str, tmp_path: Path) -> None:
    verdicts: dict[str, list[str]] = {}
    for url in (sqlite_url, pg_url):
        cli = _cli(runner, url)
        assert cli("card", "import", str(EXAMPLE.with_suffix(".json")),
                   "--session", "s1").exit_code == 0
        lines = []
        for path, needle in _bad_files(tmp_path):
            for target in (("--session", "s1"), ("--scope", SCOPE)):
                lines.append(one_error_line(cli("card", "import", str(path), *target),
                                            needle))
        for args in ((), ("--session", "s1", "--scope", SCOPE)):
            lines.append(one_error_line(
                cli("card", "import", str(EXAMPLE.with_suffix(".json")), *args),
                "give exactly one of --session and --scope"))
        lines.append(one_error_line(cli("card", "import", str(tmp_path / "none.json"),
                                        "--scope", SCOPE), "none.json: no such file"))
        with Ledger.open(url, load_vocabulary=False) as ledger:
            assert ledger.head() == 1
        verdicts[url] = lines
    assert verdicts[sqlite_url] == verdicts[pg_url]


def test_a_bad_file_creates_no_database(runner: CliRunner, tmp_path: Path) -> None:
    db = tmp_path / "new.db"
    (path, needle), *_ = _bad_files(tmp_path)
    one_error_line(_cli(runner, f"sqlite:///{db}")("card", "import", str(path),
                                                   "--scope", SCOPE), needle)
    assert not db.exists()


# -- PNG limits ---------------------------------------------------------------------------


def _with_chunks(raw: bytes, chunks: bytes) -> bytes:
    """``raw`` (a PNG) with ``chunks`` put just before its IEND."""
    iend = raw.rindex(b"IEND") - 4
    return raw[:iend] + chunks + raw[iend:]


def _ztxt(keyword: bytes, text: bytes) -> bytes:
    return _chunk(b"zTXt", keyword + b"\0\0" + zlib.compress(text, 9))


def _side_chunks(count: int) -> bytes:
    """``count`` compressed side chunks, each inflating to just under the per-chunk
    limit (what took 18.9 s to import when every zTXt was inflated)."""
    from ctxledger.io._card_files import MAX_TEXT_BYTES

    bomb = zlib.compress(b"\0" * (MAX_TEXT_BYTES - 1), 9)
    return b"".join(_chunk(b"zTXt", b"Comment%d\0\0" % index + bomb)
                    for index in range(count))


def test_side_chunks_are_not_inflated(runner: CliRunner, db_url: str,
                                      tmp_path: Path) -> None:
    import time

    path = tmp_path / "side.png"
    path.write_bytes(_with_chunks(_png(("tEXt", "chara", _b64(V2))), _side_chunks(300)))
    began = time.perf_counter()
    assert read_card(path) == V2
    took = time.perf_counter() - began
    done = _cli(runner, db_url)("card", "import", str(path), "--scope", SCOPE)
    assert done.exit_code == 0, done.stderr
    # Inflating them took seconds (300 x 16 MiB); skipping them takes milliseconds.
    assert took < 2.0, took


def test_png_limits_are_one_line_errors(runner: CliRunner, db_url: str,
                                        tmp_path: Path) -> None:
    from ctxledger.io._card_files import MAX_PNG_CHUNKS, MAX_TEXT_BYTES

    card = _b64(V2).encode()
    cases = {
        "chunk.png": (_with_chunks(_png(), _ztxt(b"chara", card + b" " * MAX_TEXT_BYTES)),
                      "chunk.png: a compressed text chunk inflates past 16 MiB (the"
                      " per-chunk limit)"),
        "total.png": (_with_chunks(_png(), _ztxt(b"chara", card + b" " * (15 << 20))
                                   + _ztxt(b"ccv3", b" " * (15 << 20))),
                      "total.png: the compressed text chunks inflate past 24 MiB in all"
                      " (the inflated total limit)"),
        "many.png": (_with_chunks(_png(), _chunk(b"tEXt", b"Comment\0x") * MAX_PNG_CHUNKS),
                     f"many.png: the PNG has more than {MAX_PNG_CHUNKS} chunks (the chunk"
                     " limit)"),
    }
    cli = _cli(runner, db_url)
    assert cli("card", "import", str(EXAMPLE.with_suffix(".json")), "--scope",
               SCOPE).exit_code == 0
    for name, (raw, message) in cases.items():
        path = tmp_path / name
        path.write_bytes(raw)
        with pytest.raises(CardFileError) as caught:
            read_card(path)
        assert str(caught.value) == message
        one_error_line(cli("card", "import", str(path), "--scope", SCOPE), message)
    with Ledger.open(db_url, load_vocabulary=False) as ledger:
        assert ledger.head() == 1
    # A card chunk's keyword is matched without case, and a side chunk's is never read.
    mixed = _with_chunks(_png(), _ztxt(b"Comment", b"\xff" * 10) + _ztxt(b"CHARA", card))
    assert read_card(mixed) == V2
