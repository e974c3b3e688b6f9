"""Token counts for today's models: ``o200k_base`` offline, the ``model`` setting, and
counts checked against a second, independent tokenizer (``bpe-openai``'s Rust one)."""

from __future__ import annotations

import gzip
import sys
from pathlib import Path
from typing import Any

import pytest
import tiktoken
import tiktoken_ext.openai_public as openai_public
from bpe_openai import _bindings as rust_bpe
from test_chat_window import sent, set_limit, start, tool_chat

from ctxledger import Ledger
from ctxledger.assembler import encodings
from ctxledger.assembler.api import policy_for
from ctxledger.assembler.encodings import (
    PACKAGED,
    VOCABULARY_FILES,
    EncodingLoader,
    EncodingUnavailable,
    PackagedRanks,
    load_encoding,
)
from ctxledger.assembler.models import encoding_for_model
from ctxledger.assembler.policy import PolicyError
from ctxledger.assembler.tokens import TokenCounter

CORPUS = [
    "hello",
    "Hello, world! How are you today?",
    "naïve café — déjà vu 🚀 日本語のテキスト, 한국어 텍스트 и русский текст",
    "<|endoftext|> is a special token written by a user",
    "def f(x):\n    return x ** 2\n\n\n\r\n  \t",
    "I'm sure they'll say it's THEIR'S, but we've WON'T'D 12345678 3.14159",
    "🧑‍🚀🔧 tool_🦊 " * 40,
    "word " * 300,
]


def refuse(url: str, timeout: float) -> bytes:
    raise OSError(f"network is down (asked for {url})")


@pytest.fixture
def empty_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "tiktoken-cache"
    directory.mkdir()
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(directory))
    return directory


def test_o200k_loads_offline_from_the_packaged_official_file(empty_cache: Path) -> None:
    loaded = load_encoding("o200k_base", fetch=refuse, timeout=0.1)
    assert loaded.method == "tiktoken:o200k_base"
    assert isinstance(loaded.encoding, tiktoken.Encoding)
    assert loaded.encoding.n_vocab == 200019
    assert list(empty_cache.iterdir()) == []  # nothing fetched, nothing written


@pytest.mark.parametrize("name", ["o200k_base", "cl100k_base"])
def test_counts_equal_an_independent_tokenizer(empty_cache: Path, name: str) -> None:
    counter = TokenCounter(name, loader=EncodingLoader(fetch=refuse, timeout=0.1))
    rust = rust_bpe.tokenizer_for_encoding(name)
    ours = [counter.count(text) for text in CORPUS]
    assert ours == [rust.count(text) for text in CORPUS]
    assert ours == [len(rust.encode(text)) for text in CORPUS]


def test_the_two_encodings_differ_on_the_corpus(empty_cache: Path) -> None:
    loader = EncodingLoader(fetch=refuse, timeout=0.1)
    o200k = [TokenCounter("o200k_base", loader=loader).count(t) for t in CORPUS]
    cl100k = [TokenCounter("cl100k_base", loader=loader).count(t) for t in CORPUS]
    assert o200k != cl100k  # a mixed-up vocabulary would show


def test_the_copied_constructor_is_tiktokens_own(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[str, str]] = []

    def capture(path: str, expected_hash: str) -> dict[bytes, int]:
        asked.append((path, expected_hash))
        return {}

    monkeypatch.setattr(openai_public, "load_tiktoken_bpe", capture)
    spec: dict[str, Any] = openai_public.o200k_base()
    packaged = PACKAGED["o200k_base"]
    assert spec["pat_str"] == packaged.pat_str
    assert spec["special_tokens"] == packaged.special_tokens
    (file,) = VOCABULARY_FILES["o200k_base"]
    assert asked == [(file.url, file.sha256)]


def test_a_packaged_file_with_another_hash_is_refused(
        empty_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "fakeranks"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "o200k_base.tiktoken.gz").write_bytes(gzip.compress(b"aGVsbG8= 0\n"))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "fakeranks", raising=False)
    real = PACKAGED["o200k_base"]
    monkeypatch.setitem(encodings.PACKAGED, "o200k_base", PackagedRanks(
        "fakeranks", real.resource, real.pat_str, real.special_tokens))
    with pytest.raises(OSError, match="does not match tiktoken's published hash"):
        encodings.packaged_encoding("o200k_base")
    with pytest.raises(EncodingUnavailable) as raised:
        load_encoding("o200k_base", fetch=refuse, timeout=0.1)
    assert "\n" not in str(raised.value) and "network is down" in str(raised.value)


# -- the model setting ---------------------------------------------------------------------

@pytest.mark.parametrize(("model", "encoding"), [
    ("gpt-4o", "o200k_base"), ("gpt-4o-2024-08-06", "o200k_base"), ("gpt-4.1", "o200k_base"),
    ("gpt-4.1-mini", "o200k_base"), ("o1", "o200k_base"), ("o3", "o200k_base"),
    ("o4-mini", "o200k_base"), ("gpt-5", "o200k_base"), ("gpt-5-mini", "o200k_base"),
    ("gpt-4", "cl100k_base"), ("gpt-4-0613", "cl100k_base"),
    ("gpt-3.5-turbo", "cl100k_base"), ("claude-sonnet-4-5", "cl100k_base"),
    # Claude Code's own model setting: its aliases name Claude models.
    ("opus", "cl100k_base"), ("sonnet[1m]", "cl100k_base"), ("haiku", "cl100k_base"),
])
def test_the_model_setting_picks_the_encoding(model: str, encoding: str) -> None:
    for profile in ("card", "session", "novel", "brief"):
        policy = policy_for(profile, {"model": model})
        assert policy.token_encoding == encoding
        assert policy.estimated == (model.startswith("claude-")
                                    or model.split("[")[0] in ("opus", "sonnet", "haiku"))
    assert encoding_for_model(model).encoding == encoding


def test_an_explicit_encoding_wins_over_the_model() -> None:
    policy = policy_for("card", {"model": "gpt-4o", "token_encoding": "cl100k_base"})
    assert policy.token_encoding == "cl100k_base"


def test_an_unknown_model_is_one_line_naming_the_setting() -> None:
    with pytest.raises(PolicyError) as raised:
        policy_for("session", {"model": "llama-3-70b"})
    message = str(raised.value)
    assert message.startswith("invalid session policy: setting 'model': unknown model "
                              "'llama-3-70b'")
    assert "gpt-4o" in message and "claude-*" in message and "\n" not in message


def test_a_policy_without_a_model_keeps_its_version() -> None:
    # The field is new: a policy that does not set it hashes as before.
    assert policy_for("card", {"context_limit": 100}).version == "card@5+11d317333f"
    assert policy_for("card", {"context_limit": 100, "model": "gpt-4o"}).version \
        != "card@5+11d317333f"


def test_a_claude_count_is_marked_an_estimate(ledger: Ledger) -> None:
    start(ledger, tool_chat(1))
    plain = ledger.assemble("chat", "card")
    ledger.append("chat", {"type": "setting.changed",
                           "data": {"key": "model", "value": "claude-opus-4-1"}})
    estimated = ledger.assemble("chat", "card")
    assert estimated.tokens.total == plain.tokens.total
    assert estimated.tokens.methods
    assert all(m.startswith("estimate:claude-opus-4-1:") for m in estimated.tokens.methods)
    assert not any(m.startswith("estimate:") for m in plain.tokens.methods)


# -- tokens.total for an o200k model, against the independent tokenizer --------------------

O200K = rust_bpe.tokenizer_for_encoding("o200k_base")


def o200k_api_count(messages: list[dict[str, Any]]) -> int:
    """OpenAI's cookbook rule (3 per message, 1 per name, 3 to prime the reply), the tool
    calls' names and arguments (3 around each), counted with bpe-openai's Rust BPE."""
    def count(text: str) -> int:
        return int(O200K.count(text))

    total = 3 if messages else 0
    for message in messages:
        total += 3 + count(message["role"])
        content = message.get("content")
        if isinstance(content, str):
            total += count(content)
        if message.get("name"):
            total += count(message["name"]) + 1
        for one in message.get("tool_calls") or []:
            total += 3 + count(one["function"]["name"]) + count(one["function"]["arguments"])
    return total


def test_an_o200k_total_is_the_api_count_at_every_limit(ledger: Ledger) -> None:
    start(ledger, tool_chat(4))
    ledger.append("chat", {"type": "setting.changed",
                           "data": {"key": "model", "value": "gpt-4o"}})
    full = ledger.assemble("chat", "card")
    assert full.tokens.encoding == "o200k_base"
    assert full.tokens.methods == ["tiktoken:o200k_base"]
    windows: set[int] = set()
    for limit in range(40, full.tokens.total + 20, 3):
        assembly = set_limit(ledger, limit)
        assert assembly.tokens.total == o200k_api_count(sent(assembly)), limit
        windows.add(len(assembly.messages))
    assert len(windows) > 4
