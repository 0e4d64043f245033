"""How a plain YAML scalar that starts like a number is read: as Kubernetes reads it, not as YAML 1.1 does.

A policy file is meant for ``kubectl apply`` as much as for ``autoscaler validate``, and the two must read the
same value from it. ``kubectl`` turns YAML into JSON with sigs.k8s.io/yaml, which reads it with go-yaml v2
(kubernetes ``vendor/gopkg.in/yaml.v2/resolve.go``, ``resolve``). PyYAML reads YAML 1.1, and the two part on
plain scalars that start with a digit, a sign or a dot (kubectl's column first, then PyYAML's):

- ``1:30`` (YAML 1.1 base 60): a string, against the integer 90. The API server then refuses a string where
  the CRD says ``type: integer``; so do we (``specbase``: a number field refuses a string);
- ``2026-12-01``: a string (go-yaml v2 keeps a timestamp as a string when the target is untyped, as it is on
  the way to JSON), against a date;
- ``1e3``, ``1.0e3`` (no sign in the exponent), ``-.5``, ``08``: floats, against strings;
- ``0o12``, ``0X1F``, ``0B11``: integers (Go's ``strconv.ParseInt`` with base 0), against strings;
- one deliberate difference: a float too large for a double (``1e400``) is infinity here, and refused as such,
  where go-yaml keeps a string (both are refused; ours says why).

Booleans part too: go-yaml v2 reads ``y``, ``Y``, ``n`` and ``N`` as booleans (its resolve table), PyYAML
and YAML 1.2 as strings. They are booleans here, as kubectl sends them: a name written ``n`` is the boolean
false, which the API server refuses where the CRD says ``type: string``, and so does ``validate``
(``policyfile.loader``: "quote it"); a boolean field written ``y`` is true either way.

Everything else (the other booleans, null, decimal and hexadecimal integers, decimals such as ``0.85``, quoted
scalars) is read as both read it. Underscores are dropped before a number is read, as go-yaml does
(``1_000``).

``Resolving`` is mixed into every loader of ``policyfile.loader``; ``CONSTRUCTORS`` build the values; ``dump``
writes a document that this loader reads back to the same values (the controller turns each ScalingPolicy
object into text this way).
"""

from __future__ import annotations

import re
from typing import Any

import yaml
from yaml.nodes import ScalarNode

INT_TAG, FLOAT_TAG, STR_TAG = "tag:yaml.org,2002:int", "tag:yaml.org,2002:float", "tag:yaml.org,2002:str"
BOOL_TAG = "tag:yaml.org,2002:bool"
#: go-yaml v2's booleans that YAML 1.1's PyYAML reads as strings (kubernetes vendor/gopkg.in/yaml.v2/resolve.go:
#: ``{true, yaml_BOOL_TAG, []string{"y", "Y", "yes", "Yes", "YES"}}`` and the ``n`` row); PyYAML has the rest.
GO_ONLY_BOOLS = {"y": True, "Y": True, "n": False, "N": False}
TIMESTAMP_TAG = "tag:yaml.org,2002:timestamp"
_YAML_TAG = "tag:yaml.org,2002:"

#: The first characters for which go-yaml tries a number (its resolve table's 'D', 'S' and '.').
NUMBER_STARTS = frozenset("+-.0123456789")
#: go-yaml's map entries among them: the infinities and NaN (YAML 1.1 spells them alike).
_SPECIAL_FLOATS = frozenset(
    [".nan", ".NaN", ".NAN"] + [sign + inf for sign in ("", "+", "-") for inf in (".inf", ".Inf", ".INF")]
)
#: ``strconv.ParseInt(s, 0, 64)``'s syntax, on the text without underscores (prefix 0 alone is octal).
_GO_INT = re.compile(r"[-+]?(?:0[xX][0-9a-fA-F]+|0[oO][0-7]+|0[bB][01]+|0[0-7]*|[1-9][0-9]*)")
#: go-yaml's ``yamlStyleFloat``, on the text without underscores.
_GO_FLOAT = re.compile(r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?")
#: A text that starts with ``.`` is a float when Go's ``ParseFloat`` reads it as it stands (no underscores).
_DOT_FLOAT = re.compile(r"\.[0-9]+(?:[eE][-+]?[0-9]+)?")
_INT64_MIN, _UINT64_MAX = -(2**63), 2**64 - 1
#: Longer than any 64-bit integer in any base Go reads (64 binary digits, a sign and a prefix): Python's int()
#: refuses texts beyond 4,300 digits with a ValueError, and such a number is a float (infinity) anyway.
_INT_DIGITS = 70


def number(text: str) -> int | float | None:
    """The number a plain scalar ``text`` is to kubectl (see the module docstring), or None for a string."""
    if text in _SPECIAL_FLOATS:
        return float(text.replace(".", "", 1))  # "+inf", "nan"...
    if text[:1] == ".":
        return float(text) if _DOT_FLOAT.fullmatch(text) else None
    plain = text.replace("_", "")
    if _GO_INT.fullmatch(plain) and len(plain) <= _INT_DIGITS:
        value = _int(plain)
        if _INT64_MIN <= value <= _UINT64_MAX and not (value > 2**63 - 1 and plain[:1] in "+-"):
            return value
    if _GO_FLOAT.fullmatch(plain):
        return float(plain)  # beyond a double (1e400, 5,000 digits): infinity
    return None


def _int(plain: str) -> int:
    sign = -1 if plain[:1] == "-" else 1
    digits = plain.lstrip("+-")
    if len(digits) > 1 and digits[0] == "0" and digits[1].isdigit():
        return sign * int(digits, 8)
    return sign * int(digits, 0)


def tag(text: str) -> str | None:
    """The tag kubectl gives a plain scalar ``text`` that starts like a number; None when it does not start so
    (the loader's own resolver answers for it)."""
    if text[:1] not in NUMBER_STARTS:
        return None
    value = number(text)
    if value is None:
        return STR_TAG
    return INT_TAG if type(value) is int else FLOAT_TAG


class Resolving:
    """A resolver mix-in (before a PyYAML loader or dumper class): plain scalars that start like a number get
    kubectl's tag (``tag``); everything else the loader's own."""

    def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
        if kind is ScalarNode and implicit[0]:
            if value[:1] in NUMBER_STARTS:
                found = tag(value)
                if found is not None:
                    return found
            elif value in GO_ONLY_BOOLS:
                return BOOL_TAG
        return super().resolve(kind, value, implicit)  # type: ignore[misc]


def construct_bool(loader: Any, node: Any) -> Any:
    """A ``bool``-tagged scalar's value: PyYAML's (``yes``, ``off``...) and go-yaml's ``y``/``n``; an explicit
    ``!!bool`` on anything else is refused at its mark."""
    text = str(node.value) if isinstance(node, ScalarNode) else ""
    if text in GO_ONLY_BOOLS:
        return GO_ONLY_BOOLS[text]
    value = yaml.constructor.SafeConstructor.bool_values.get(text.lower())
    if value is None:
        raise _not_read(node, "a boolean")
    return value


def construct_int(loader: Any, node: Any) -> Any:
    """An ``int``-tagged scalar's value, kubectl's number. An explicit ``!!int`` on what go-yaml does not read as an
    integer (``!!int 1:30``, ``!!int 12.0``, ``!!int abc``) is refused at its mark, as kubectl refuses it
    ("cannot decode !!str `1:30` as a !!int"); PyYAML took the first as 90 and failed on the last."""
    value = number(str(node.value)) if isinstance(node, ScalarNode) else None
    if type(value) is not int:
        raise _not_read(node, "an integer")
    return value


def construct_float(loader: Any, node: Any) -> Any:
    """A ``float``-tagged scalar's value (an integer written where a float is tagged is that float); refused at
    its mark when it is no number (``!!float abc`` ended ``validate`` with an internal error)."""
    value = number(str(node.value)) if isinstance(node, ScalarNode) else None
    if value is None:
        raise _not_read(node, "a number")
    return float(value)


def _not_read(node: Any, what: str) -> yaml.constructor.ConstructorError:
    shown = str(getattr(node, "value", ""))[:40]
    tag = str(node.tag).replace(_YAML_TAG, "!!")
    return yaml.constructor.ConstructorError(
        None, None, f"cannot read {shown!r} as {what} (its tag {tag} asks for one)", node.start_mark
    )


def construct_timestamp(loader: Any, node: Any) -> Any:
    """A timestamp is kept as the string written (go-yaml v2 does so on the way to JSON)."""
    return loader.construct_scalar(node)


#: The constructors of the tags ``Resolving`` gives, for every loader.
CONSTRUCTORS = {INT_TAG: construct_int, FLOAT_TAG: construct_float, TIMESTAMP_TAG: construct_timestamp,
                BOOL_TAG: construct_bool}


class _Dumper(Resolving, yaml.SafeDumper):
    """PyYAML's safe dumper, quoting every string that the loader would read as something else plain (``1e3``)."""


def dump(document: Any) -> str:
    """``document`` as YAML text that the loader reads back to equal values (keys in the order given)."""
    return yaml.dump(document, Dumper=_Dumper, sort_keys=False)
