"""Matching one lorebook key against a text: a plain substring (case-insensitive unless
the entry says otherwise) or, for V3 ``use_regex`` entries, a regular expression.

A regex key is a JavaScript literal ``/pattern/flags`` or a bare pattern, searched with
RE2 (``google-re2``): its time is linear in the text, so no key and no message can make
an assembly slow, and whether a key matches never depends on the machine. The flags:
``i`` case-insensitive (Unicode simple folding), ``m`` ``^``/``$`` at line ends, ``s``
``.`` matches a line feed; ``u`` is how RE2 reads every pattern (by code point); ``g``,
``y`` and ``d`` mean nothing to a yes/no search; ``v`` is refused (its class syntax is
not RE2's). JavaScript's spellings RE2 lacks (``\\uXXXX``, ``\\u{X}``, ``[^]``, ``[]``, a
``[`` inside a class) are rewritten first (``_re2_source``).

A pattern RE2 refuses although JavaScript reads it (lookaround, backreferences, a
repetition over 1000, a pattern too large for RE2's memory, an escape RE2 lacks) is
*unsupported*: it never matches, and says why. A pattern neither reads (an unclosed
group) is *invalid*. ``docs/cards.md`` lists what RE2 reads differently.

Plain keys are plain substring tests (``in`` on the casefolded text): with a few thousand
keys per book a message of a thousand characters is scanned in about a millisecond, so
no automaton (Aho-Corasick) is worth its build time and its dependency.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any, Final

import re2

# JavaScript's flag letters only: "/usr/bin" is a bare pattern, not /usr/ with flags.
_LITERAL = re.compile(r"/(.+)/([dgimsuvy]*)", re.DOTALL)
# A pattern's tokens as _re2_source reads them: JavaScript's \uXXXX / \u{X}, any other
# backslash pair ("\\u0041" is a backslash and "u0041"), [^] and [], one character.
_TOKEN = re.compile(r"\\u[0-9A-Fa-f]{4}|\\u\{[0-9A-Fa-f]{1,6}\}|\\.|\[\^?\]|.", re.DOTALL)
_ANY = "\\x{0}-\\x{10FFFF}"
# RE2's messages for what JavaScript reads but RE2 does not, and what to call it.
_UNSUPPORTED: Final = (
    ("invalid perl operator: (?=", "lookahead"),
    ("invalid perl operator: (?!", "negative lookahead"),
    ("invalid perl operator: (?<=", "lookbehind"),
    ("invalid perl operator: (?<!", "negative lookbehind"),
    ("invalid escape sequence: \\k", "a named backreference"),
    ("invalid repetition size", "a repetition over 1000"),
    ("pattern too large", "a pattern too large for RE2's memory limit"),
    ("invalid escape sequence: \\", "an escape RE2 does not have"),
    ("invalid character class range: \\p", "a Unicode property RE2 does not have"),
    ("invalid character class range: \\P", "a Unicode property RE2 does not have"),
)
_BACKREFERENCE = re.compile(r"invalid escape sequence: \\[1-9]")


@dataclass(frozen=True, slots=True)
class Matcher:
    """One key, ready to search texts. ``error`` says why it can never match (a regex
    that does not compile), ``unsupported`` says so for a pattern JavaScript reads but
    RE2 refuses; a blank key never matches either, without either."""

    key: str
    """The key as written."""
    case_sensitive: bool
    use_regex: bool
    needle: str | None
    """A plain key's text to find (casefolded unless case-sensitive); None for a regex
    key or a blank one."""
    pattern: Any
    """A regex key's compiled RE2 pattern (searches UTF-8 bytes), else None."""
    error: str | None
    unsupported: str | None = None

    @property
    def problem(self) -> str | None:
        """What makes the key unable to match, worded for a warning; None if nothing."""
        if self.unsupported is not None:
            return f"regex key {self.key!r} is not supported by RE2: {self.unsupported}"
        if self.error is not None:
            return f"invalid regex key {self.key!r}: {self.error}"
        return None

    def search(self, text: str, folded: str, encoded: bytes | None = None) -> bool:
        """Whether the key occurs in ``text`` (``folded`` is ``text.casefold()``,
        ``encoded`` its ``encode_text``, made once per text for all regex keys)."""
        if self.needle is not None:
            return self.needle in (text if self.case_sensitive else folded)
        if self.pattern is None:
            return False
        data = encode_text(text) if encoded is None else encoded
        return self.pattern.search(data) is not None


def encode_text(text: str) -> bytes:
    """``text`` as RE2 searches it: UTF-8, a lone surrogate kept as its three bytes
    rather than an error (RE2 reads them as one character, as JavaScript does)."""
    return text.encode("utf-8", "surrogatepass")


def _options(case_sensitive: bool, dot_nl: bool) -> Any:
    options = re2.Options()
    options.log_errors = False  # a refused pattern is reported as a problem, not logged
    options.case_sensitive = case_sensitive
    options.dot_nl = dot_nl
    return options


def _re2_source(source: str) -> str:
    """``source`` written for RE2 where JavaScript's syntax has another spelling there:
    ``\\uXXXX`` and ``\\u{X}`` as ``\\x{X}``, ``[^]`` (any character) and ``[]`` (none)
    as classes RE2 reads, and a ``[`` inside a class as the literal it is."""
    out: list[str] = []
    in_class = False
    for token in _TOKEN.findall(source):
        if token.startswith("\\u") and len(token) > 2:
            out.append(f"\\x{{{token[2:].strip('{}')}}}")
        elif token in ("[^]", "[]") and not in_class:
            out.append(f"[{_ANY}]" if token == "[^]" else f"[^{_ANY}]")
        elif token in ("[^]", "[]"):  # in a class: a literal "[" (and "^"), then its end
            out.append("\\[" + token[1:])
            in_class = False
        elif token == "[":
            out.append("\\[" if in_class else token)
            in_class = True
        else:
            if token == "]":
                in_class = False
            out.append(token)
    return "".join(out)


def _why_unsupported(message: str) -> str | None:
    """What JavaScript syntax RE2's error ``message`` is about, or None for a pattern
    JavaScript refuses as well."""
    if _BACKREFERENCE.search(message):
        return f"a backreference ({message})"
    for prefix, what in _UNSUPPORTED:
        if message.startswith(prefix):
            return f"{what} ({message})"
    return None


@functools.lru_cache(maxsize=16_384)
def compile_key(key: str, *, case_sensitive: bool, use_regex: bool) -> Matcher:
    """The matcher of ``key`` (cached: a card's keys are compiled once per process)."""
    if not key.strip():
        return Matcher(key, case_sensitive, use_regex, None, None, None)
    if not use_regex:
        return Matcher(key, case_sensitive, use_regex,
                       key if case_sensitive else key.casefold(), None, None)
    source, flags = key, ""
    literal = _LITERAL.fullmatch(key)
    if literal is not None:
        source, flags = literal.group(1), literal.group(2)
    if not source.strip():
        return Matcher(key, case_sensitive, use_regex, None, None, None)
    if "v" in flags:
        return Matcher(key, case_sensitive, use_regex, None, None, None,
                       "the v flag (its class syntax is not RE2's)")
    # (?m) before the pattern covers every alternative; wrapping it in a group could
    # turn an unbalanced ")(" into a valid pattern.
    written = ("(?m)" if "m" in flags else "") + _re2_source(source)
    options = _options(case_sensitive and "i" not in flags, "s" in flags)
    try:
        pattern = re2.compile(encode_text(written), options)
    except re2.error as exc:
        message = exc.args[0] if exc.args else str(exc)
        text = message.decode("utf-8", "replace") if isinstance(message, bytes) \
            else str(message)
        why = _why_unsupported(text)
        return Matcher(key, case_sensitive, use_regex, None, None,
                       text if why is None else None, why)
    return Matcher(key, case_sensitive, use_regex, None, pattern, None)
