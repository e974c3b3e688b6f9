"""Card memory templates: ``{{variable}}`` substitution with ``{{#if variable}}`` blocks.

The syntax is the character-card convention (SillyTavern story strings): ``{{name}}``
inserts a value verbatim, and ``{{#if name}}...{{/if}}`` keeps its body only when the value
is not blank, so an expired field leaves no dangling label. It is written here rather
than taken from a Mustache/Handlebars library because those HTML-escape ``{{name}}`` by
default and use a different block syntax than card templates do; this is ~60 lines.
Unknown variables and unbalanced blocks are errors, found when the template is parsed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

_TAG = re.compile(r"\{\{\s*(#if\s+([A-Za-z_]\w*)|/if|([A-Za-z_]\w*))\s*\}\}")
_MACRO = re.compile(r"\{\{(.*?)\}\}|<(BOT|USER|CHAR)>", re.IGNORECASE | re.DOTALL)


class TemplateError(ValueError):
    """A template uses an unknown variable or has unbalanced ``{{#if}}`` blocks."""


@dataclass(frozen=True, slots=True)
class _Text:
    text: str


@dataclass(frozen=True, slots=True)
class _Var:
    name: str


@dataclass(frozen=True, slots=True)
class _If:
    name: str
    body: tuple[_Node, ...]


_Node = _Text | _Var | _If


@dataclass(frozen=True, slots=True)
class Template:
    """A parsed template."""

    source: str
    nodes: tuple[_Node, ...]

    def render(self, values: Mapping[str, str], *,
               conditions: Mapping[str, str] | None = None) -> str:
        """The text with ``values`` substituted; trailing whitespace is removed.

        ``conditions`` (default: ``values``) decides the ``{{#if}}`` blocks, so the
        template's own text can be rendered alone (values blanked, blocks as in the real
        rendering) to count it separately from the fields.
        """
        out: list[str] = []
        _render(self.nodes, values, values if conditions is None else conditions, out)
        return "".join(out).rstrip()

    def render_parts(self, values: Mapping[str, str],
                     slots: Sequence[str]) -> list[tuple[str | None, str]]:
        """The rendering as ``(variable, text)`` parts in order, for laying it out.

        Variables in ``slots`` come out as their own parts (``(name, value)``); everything
        else (the template's words, other variables) as ``(None, text)``. Joined, the parts
        give ``render(values)`` except that whitespace is only stripped from the trailing
        words, never from a slot's value.
        """
        raw: list[tuple[str | None, str]] = []
        _parts(self.nodes, values, frozenset(slots), raw)
        while raw and raw[-1][0] is None and not raw[-1][1].rstrip():
            raw.pop()
        if raw and raw[-1][0] is None:
            raw[-1] = (None, raw[-1][1].rstrip())
        merged: list[tuple[str | None, str]] = []
        for name, text in raw:
            if name is None and merged and merged[-1][0] is None:
                merged[-1] = (None, merged[-1][1] + text)
            elif name is not None or text:
                merged.append((name, text))
        return merged

    def variables(self) -> list[str]:
        """Every variable the template mentions, sorted."""
        found: set[str] = set()
        _collect(self.nodes, found)
        return sorted(found)


def parse_template(source: str, allowed: Sequence[str]) -> Template:
    """Parse ``source``; every variable must be in ``allowed``."""
    stack: list[tuple[str | None, list[_Node]]] = [(None, [])]
    cursor = 0
    for match in _TAG.finditer(source):
        if match.start() > cursor:
            stack[-1][1].append(_Text(source[cursor:match.start()]))
        cursor = match.end()
        if match.group(2) is not None:
            _check(match.group(2), allowed)
            stack.append((match.group(2), []))
        elif match.group(1) == "/if":
            if len(stack) == 1:
                raise TemplateError("template has {{/if}} without a matching {{#if}}")
            name, body = stack.pop()
            assert name is not None
            stack[-1][1].append(_If(name, tuple(body)))
        else:
            _check(match.group(3), allowed)
            stack[-1][1].append(_Var(match.group(3)))
    if len(stack) != 1:
        raise TemplateError(f"template has {{{{#if {stack[-1][0]}}}}} without {{{{/if}}}}")
    if cursor < len(source):
        stack[0][1].append(_Text(source[cursor:]))
    return Template(source, tuple(stack[0][1]))


@dataclass(frozen=True, slots=True)
class Macros:
    """The card macros, as SillyTavern substitutes them in card fields and lorebook
    entries (names are case-insensitive):

    ``{{char}}``/``<BOT>``/``<CHAR>`` the character's name, ``{{user}}``/``<USER>`` the
    user's, ``{{original}}`` what a card's ``system_prompt`` or
    ``post_history_instructions`` replaces (empty elsewhere), ``{{newline}}`` a line break,
    ``{{// …}}`` a comment (removed). Any other ``{{…}}`` stays as written and is listed
    by ``unknown``: a macro that needs the wall clock or randomness (``{{time}}``,
    ``{{random}}``) would break reproducible assemblies, so none is run.
    """

    user: str
    char: str

    def apply(self, text: str, *, original: str = "") -> str:
        """``text`` with the known macros substituted."""
        if "{{" not in text and "<" not in text:
            return text

        def one(match: re.Match[str]) -> str:
            legacy = match.group(2)
            if legacy is not None:
                return self.user if legacy.upper() == "USER" else self.char
            name = match.group(1).strip()
            if name.startswith("//"):
                return ""
            value = self._known(name.lower(), original)
            return match.group(0) if value is None else value

        return _MACRO.sub(one, text)

    @staticmethod
    def unknown(text: str) -> list[str]:
        """The macros of ``text`` that ``apply`` leaves as written, in order of
        appearance (each once)."""
        found: list[str] = []
        for match in _MACRO.finditer(text):
            name = (match.group(1) or "").strip()
            if (match.group(2) is None and not name.startswith("//")
                    and name.lower() not in _KNOWN and match.group(0) not in found):
                found.append(match.group(0))
        return found

    def _known(self, name: str, original: str) -> str | None:
        if name == "char":
            return self.char
        if name == "user":
            return self.user
        if name == "original":
            return original
        if name == "newline":
            return "\n"
        return None


_KNOWN = frozenset({"char", "user", "original", "newline"})


def _check(name: str, allowed: Sequence[str]) -> None:
    if name not in allowed:
        raise TemplateError(
            f"template uses unknown variable {{{{{name}}}}} (known: {', '.join(allowed)})")


def _render(nodes: Sequence[_Node], values: Mapping[str, str], conditions: Mapping[str, str],
            out: list[str]) -> None:
    for node in nodes:
        if isinstance(node, _Text):
            out.append(node.text)
        elif isinstance(node, _Var):
            out.append(values.get(node.name, ""))
        elif conditions.get(node.name, "").strip():
            _render(node.body, values, conditions, out)


def _parts(nodes: Sequence[_Node], values: Mapping[str, str], slots: frozenset[str],
           out: list[tuple[str | None, str]]) -> None:
    for node in nodes:
        if isinstance(node, _Text):
            out.append((None, node.text))
        elif isinstance(node, _Var):
            value = values.get(node.name, "")
            out.append((node.name if node.name in slots and value else None, value))
        elif values.get(node.name, "").strip():
            _parts(node.body, values, slots, out)


def _collect(nodes: Sequence[_Node], found: set[str]) -> None:
    for node in nodes:
        if isinstance(node, _Var):
            found.add(node.name)
        elif isinstance(node, _If):
            found.add(node.name)
            _collect(node.body, found)
