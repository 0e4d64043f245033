"""A native YAML parser that builds plain values, used only for the texts it reads as PyYAML does.

The loader's other YAML paths (libyaml composing, then a walk; or PyYAML's pure-Python parser) make a Python
node, with two marks, for every value of every file: most of what loading thousands of policies costs
(docs/policies.md, "Loading many policies"). ``yaml_rs`` (the Rust ``saphyr`` parser) builds the dicts, lists
and scalars in native code, about ten times faster, and keeps no line or column: the loader uses its value
only for a document that turns out valid, and reads the file again the line-tracking way whenever there is
anything to report (a problem, or a clash across files that must say where a name is written).

``yaml_rs`` reads YAML 1.2 and PyYAML reads YAML 1.1, and the two parsers differ at the edges, so ``load``
answers ``None`` (the caller then takes the usual path) unless every one of these holds, which together keep
it to the texts where both give the same value (tests/policyfile/test_plain_yaml.py compares them):

1. the text (less its comment lines, when that is safe: ``_view``) has none of the characters, line starts
   or scalars where they part (``_outside``): control and odd characters, tags (``!``), anchors and aliases
   (``&``, ``*``), complex keys and block scalars (``?``, ``|``, ``>``), escapes (``\\``), directives and
   document markers (``%``, ``---``, ``...`` starting a line), a scalar starting with ``:``, and numbers
   written in a form that YAML 1.1 reads another way or not as a number (``012``, ``0o12``, ``0x1F``,
   ``1e3``, ``1.0e3``, ``-.5``, ``.inf``, ``_6``: leading zeros, signs before a dot, exponents, leading dots
   and underscores all send the text the usual way); and every flow collection closes on the line it opens,
   holding no quote and no ``#`` (``_flows_end_on_their_line``);
2. ``yaml_rs`` parses it, as one mapping, no deeper than ``max_depth`` and with at most ``max_nodes`` values;
3. every key is a string, and every string (key or value) is one that YAML 1.1 would read as a string were
   it written plain (so ``"yes"``, ``'12'``, ``<<`` or ``12:30``, which may have been written plain and then
   mean a boolean, a number, a merge or a sexagesimal number to PyYAML, send the text the usual way).

What is left, ``true``/``false``, ``null``/``~``/empty, decimal integers and decimals such as ``0.99``, both
read alike. The loader's own path reads a few plain scalars as kubectl does rather than as PyYAML does
(``scalars``: ``1e3``, ``0o12``, ``08``, ``-.5`` are numbers, ``1:30`` and dates strings); every one of them
is a form that 1 or 3 already sends the usual way, so what this path answers is also what the loader answers
(tests/policyfile/test_fast_yaml.py compares the paths). Without ``yaml_rs`` installed, ``AVAILABLE`` is False
and ``load`` always answers ``None``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import yaml

from autoscaler.policyfile import scalars

try:
    import yaml_rs

    AVAILABLE = True
except ImportError:  # optional: the loader's other paths give the same answers, slower
    AVAILABLE = False

#: Where the two parsers may part (see the module docstring, 1). A scalar starts after a space, a line start or
#: ``[{,``; after anything else it is inside a longer word (``v5e-8``, ``app-00012``, ``$schema=./schema.json``).
_OUTSIDE_CHARACTERS = re.compile(r"[\t\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ufeff\u2028\u2029\ufffe\uffff!&*?|>\\]")
#: A scalar that starts as a number in a form YAML 1.1 reads another way, or with ``.``, ``_`` or ``:`` (the
#: look-ahead lets most spaces fail at once: several times faster than without it).
_PARTING_FORM = r"(?:[-+]?(?:0[0-9_oOxXbB]|[._]|[0-9][0-9_.]*[eE_])|:)"
_PARTING_SCALAR = re.compile(r"[\s\[{,](?=[-+.0-9_:])" + _PARTING_FORM)
_PARTING_FIRST = re.compile(_PARTING_FORM)
#: Directives and document markers start a line.
_OUTSIDE_LINE_STARTS = ("---", "...", "%")
_OUTSIDE_LINES = tuple("\n" + start for start in _OUTSIDE_LINE_STARTS)


#: A line that is only a comment. In a text where no other line holds an odd number of ``"`` or of ``'`` (so
#: that no quoted scalar runs over lines: a line inside one is text, not a comment), and with ``|`` and ``>``
#: refused (no block scalar), both parsers skip such a line whatever it holds.
_COMMENT_LINE = re.compile(r"^[ ]*#[^\n]*", re.MULTILINE)


def _view(text: str) -> str:
    """What the checks read: ``text`` with every line break a ``\\n`` (YAML also breaks lines at a lone ``\\r``;
    the other breaks are refused) and, when it is safe (``_COMMENT_LINE``), without its comment lines, whose
    prose (dates, versions, ``e.g.``, ``>=``) would otherwise send most hand-written files the usual way."""
    view = text.replace("\r", "\n") if "\r" in text else text
    if "#" in view:
        bare = _COMMENT_LINE.sub("", view)
        if not any(line.count('"') % 2 or line.count("'") % 2 for line in bare.split("\n")):
            return bare
    return view


def _outside(view: str) -> bool:
    """Whether the text holds any of the characters, line starts or scalars where the two parsers part
    (``view``: the text with every line break a ``\n``)."""
    return bool(
        _OUTSIDE_CHARACTERS.search(view)
        or view.startswith(_OUTSIDE_LINE_STARTS)
        or any(start in view for start in _OUTSIDE_LINES)
        or _PARTING_FIRST.match(view)
        or _PARTING_SCALAR.search(view)
    )


_STR = "tag:yaml.org,2002:str"
_RESOLVER = yaml.resolver.Resolver()
#: PyYAML's implicit resolvers by first character: a plain scalar whose first character has none is a string.
_FIRST = frozenset(_RESOLVER.yaml_implicit_resolvers)
#: Strings already resolved (short ones, a bounded count): keys and names repeat across thousands of files.
_TAGS: dict[str, str] = {}
_TAGS_MAX, _TAG_VALUE_MAX = 20_000, 64


#: Where a flow collection may start: ``[`` or ``{`` at a line start or after a space (a node starts only there,
#: tags and anchors being refused); one inside a word (``x{a="b"}`` in a query) is text.
_FLOW_OPENING = re.compile(r"[\[{]")
_CLOSING = {"]": "[", "}": "{"}


def _flows_end_on_their_line(text: str) -> bool:
    """Whether every flow collection closes on the line it opens, holding no quote and no ``#``: a flow that
    runs over lines, or holds a quoted string (which may hold a bracket), is where the two parsers part
    (PyYAML refuses some continuation lines ``yaml_rs`` takes), so such a text goes the usual way."""
    if "[" not in text and "{" not in text:
        return True
    checked = 0  # the end of the last line checked: one check covers every flow on its line
    for match in _FLOW_OPENING.finditer(text):
        at = match.start()
        if at < checked or (at > 0 and not text[at - 1].isspace()):
            continue
        end = text.find("\n", at)
        checked = end if end >= 0 else len(text)
        rest = text[at:checked]
        if '"' in rest or "'" in rest or "#" in rest:
            return False
        stack: list[str] = []
        for char in rest:
            if char in "[{":
                stack.append(char)
            elif char in _CLOSING and (not stack or stack.pop() != _CLOSING[char]):
                return False
        if stack:
            return False
    return True


class _Outside(Exception):
    """The walk met something outside what both parsers read alike."""


@dataclass(frozen=True, slots=True)
class Plain:
    """What ``load`` read: the mapping, its values counted (keys included, as PyYAML's nodes), and whether every
    value under a key in the caller's ``watch`` set is an int or a float (not a bool) within ±``bound``, or
    null (``watched_plain``; True when nothing is watched)."""

    value: dict[str, Any]
    count: int
    watched_plain: bool


def load(
    text: str, *, max_depth: int, max_nodes: int, watch: frozenset[str] = frozenset(), bound: float = 0.0
) -> Plain | None:
    """What a one-mapping ``text`` reads as when ``yaml_rs`` reads it as PyYAML's safe loader would, else
    ``None`` (see the module docstring). ``watch`` and ``bound``: see ``Plain.watched_plain`` (the loader
    watches the number fields of the policy models, to skip a check it has then shown cannot fail)."""
    if not AVAILABLE:
        return None
    view = _view(text)
    if _outside(view) or not _flows_end_on_their_line(view):
        return None
    try:
        data = yaml_rs.loads(text, parse_datetime=False)
    except BaseException as exc:  # a Rust panic arrives as a BaseException (pyo3's PanicException)
        if isinstance(exc, KeyboardInterrupt | SystemExit):
            raise
        return None
    if type(data) is not dict:
        return None
    walk = _Walk(max_depth, watch, bound)
    try:
        count = walk.mapping(data, 0)
    except (_Outside, RecursionError):
        return None
    return Plain(data, count, walk.watched_plain) if count <= max_nodes else None


class _Walk:
    """A module-level walk over an object rather than a recursive closure (a closure that calls itself is a
    reference cycle per document, which only the paused cyclic collector would free).

    Each value is judged in its parent's loop (one call per collection, not per value: most values are scalars):
    deeper than ``max_depth`` (a scalar too: PyYAML's path reports any value deeper than the limit), a string
    that PyYAML would read as something else, a key that is not such a string, or a type other than str, int,
    float, bool, null, mapping and list raise ``_Outside``. The count is PyYAML's node count: one per value and
    one per key."""

    __slots__ = ("bound", "max_depth", "watch", "watched_plain")

    def __init__(self, max_depth: int, watch: frozenset[str], bound: float) -> None:
        self.max_depth, self.watch, self.bound = max_depth, watch, bound
        self.watched_plain = True

    def mapping(self, value: dict[Any, Any], depth: int) -> int:
        depth += 1  # the depth of its values
        if depth > self.max_depth and value:
            raise _Outside
        count = 1 + 2 * len(value)  # itself, and each key and value (a collection adds what is inside it)
        watch = self.watch
        for key, item in value.items():
            if type(key) is not str or (key[:1] in _FIRST and not _reads_as_string(key)):
                raise _Outside
            kind = type(item)
            if kind is str:
                if item[:1] in _FIRST and not _reads_as_string(item):  # the first test saves a call for most
                    raise _Outside
            elif kind is dict:
                count += self.mapping(item, depth) - 1
            elif kind is list:
                count += self.sequence(item, depth) - 1
            elif not (kind is int or kind is float or kind is bool or item is None):
                raise _Outside  # a date, bytes: anything else
            if key in watch and item is not None and not (
                (kind is int or kind is float) and -self.bound <= item <= self.bound
            ):
                self.watched_plain = False
        return count

    def sequence(self, value: list[Any], depth: int) -> int:
        depth += 1
        if depth > self.max_depth and value:
            raise _Outside
        count = 1 + len(value)
        for item in value:
            kind = type(item)
            if kind is str:
                if item[:1] in _FIRST and not _reads_as_string(item):
                    raise _Outside
            elif kind is dict:
                count += self.mapping(item, depth) - 1
            elif kind is list:
                count += self.sequence(item, depth) - 1
            elif not (kind is int or kind is float or kind is bool or item is None):
                raise _Outside
        return count


def _reads_as_string(value: str) -> bool:
    """Whether PyYAML reads ``value``, written plain, as a string (its own resolver's answer), and the loader too
    (go-yaml's ``y``/``n`` booleans, ``scalars.GO_ONLY_BOOLS``, are strings to PyYAML only)."""
    if value in scalars.GO_ONLY_BOOLS:
        return False
    if value[:1] not in _FIRST:
        return True
    tag = _TAGS.get(value)
    if tag is None:
        tag = _RESOLVER.resolve(yaml.ScalarNode, value, (True, False))  # type: ignore[no-untyped-call]
        if len(_TAGS) < _TAGS_MAX and len(value) <= _TAG_VALUE_MAX:
            _TAGS[value] = tag
    return tag == _STR
