"""The base of every policy-language model: camelCase field names, unknown fields rejected, immutable, and
numbers that can be meant.

Every number field of every model (policies, the controller config, the simulator's files) refuses, at the
field's own FILE:LINE:COL:

- a boolean (``evaluationPeriodSeconds: true`` would otherwise be read as 1 second);
- NaN and infinities (``.inf``, ``.nan``; ``averageValue: .inf`` made replay crash with OverflowError);
- a magnitude above ``MAX_NUMBER`` (``1e300``). Kubernetes quantities stop near 9.2e15 milli-units
  (int64), so no target, threshold or count of ours is meant above 10^15.

Fields with a tighter meaning (periods, replica counts) add their own bounds where they are declared.
"""

from __future__ import annotations

import math
import re
import types
import typing
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationInfo, model_validator
from pydantic.alias_generators import to_camel

from autoscaler.core import fast

#: The largest magnitude any number in a policy or config file may have.
MAX_NUMBER = 1e15
#: The largest replica count (``maxReplicas``, fallback replicas): GKE's largest cluster has 65,000 nodes.
MAX_REPLICAS = 100_000


def _numeric(annotation: Any) -> bool:
    """Whether ``annotation`` admits an int or a float (through Optional and unions)."""
    if annotation in (int, float):
        return True
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType, typing.Annotated):
        return any(_numeric(a) for a in typing.get_args(annotation))
    return False


class SpecModel(BaseModel):
    model_config = ConfigDict(
        extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True, allow_inf_nan=False
    )

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        _MODELS.append(cls)  # for number_keys

    @model_validator(mode="before")
    @classmethod
    def _numbers_that_can_be_meant(cls, data: Any, info: ValidationInfo) -> Any:
        # A model validator rather than a field validator on "*": pydantic forbids "before" validators on
        # the discriminator fields ("type") that "*" would include. FieldError points at the field's line.
        if info.context is NUMBERS_SHOWN_FINE:
            return data  # the caller has shown that no number in its input can fail this check
        if isinstance(data, dict):
            fields = _number_fields(cls)
            for key, value in data.items():  # a document names few of a model's fields: walk those
                admits_bool = fields.get(key)
                if admits_bool is not None and type(value) not in _PLAIN_NUMBERS:
                    _check_number(value, key, admits_bool=admits_bool)
                elif admits_bool is not None and not -MAX_NUMBER <= value <= MAX_NUMBER:
                    _check_number(value, key, admits_bool=admits_bool)  # out of range, or NaN
        return data


#: The validation context (``model_validate(data, context=NUMBERS_SHOWN_FINE)``) under which the check above is
#: skipped, for a caller that has walked its plain input and found that every value under a key in
#: ``number_keys()`` is an int or float (not a bool) within ±``MAX_NUMBER``: then no model's check can refuse
#: anything, whatever model the value lands in. Only that validation call skips it: models a validator or a
#: default factory builds are validated without the context, so they are checked as always.
NUMBERS_SHOWN_FINE: Any = types.MappingProxyType({"numbers": "shown fine by the caller"})


def number_keys() -> frozenset[str]:
    """Every input key (alias and name) that is a number field of some ``SpecModel`` defined so far: the keys
    whose values ``_numbers_that_can_be_meant`` looks at, in whichever model."""
    return _number_keys(len(_MODELS))


#: Every subclass of ``SpecModel``, in the order they were defined (``SpecModel.__pydantic_init_subclass__``);
#: only ever appended to, so its first ``n`` entries are always the same models.
_MODELS: list[type[BaseModel]] = []


@fast.memoized(maxsize=8)  # one entry per count of models: a new one only when a model class is defined
def _number_keys(count: int) -> frozenset[str]:
    """The number keys of the first ``count`` models of ``_MODELS``."""
    return frozenset(key for cls in _MODELS[:count] for key in _number_fields(cls))


#: Types whose only possible fault is the range (bool, str and the rest take ``_check_number``'s whole path).
_PLAIN_NUMBERS = (int, float)


def _check_number(value: Any, key: str, *, admits_bool: bool) -> None:
    if isinstance(value, str):
        raise FieldError(_string_message(value), key)
    if isinstance(value, bool):
        if not admits_bool:
            raise FieldError(f"should be a number, not the boolean {str(value).lower()}", key)
    elif isinstance(value, float) and not math.isfinite(value):
        raise FieldError(f"should be a finite number, not {value}", key)
    elif isinstance(value, int | float) and abs(value) > MAX_NUMBER:
        raise FieldError(f"{_shown(value)} is out of range; numbers here are at most {MAX_NUMBER:g} in magnitude", key)


def _shown(value: float) -> str:
    """``value`` in six digits; an integer too large for a float (a YAML parser may build one from 5,000 digits)
    by its size (formatting it raised OverflowError, an internal error of ``validate``)."""
    try:
        return f"{value:.6g}"
    except OverflowError:
        return f"a number of about {int(abs(int(value)).bit_length() * math.log10(2)) + 1} digits"


#: YAML 1.1's base-60 numbers (``1:30``), which Kubernetes (go-yaml) and YAML 1.2 read as strings.
_BASE_60 = re.compile(r"[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?")


def _string_message(value: str) -> str:
    """Why a string is refused in a number field, and what to write instead. The API server refuses a string
    where the CRD says ``type: integer`` or ``number`` (``"12"``), and reads ``1:30`` as a string (YAML 1.1's
    base 60 is gone from YAML 1.2 and from go-yaml): a policy ``validate`` takes must be one it takes."""
    shown = value if len(value) <= 40 else value[:37] + "..."
    text = value.strip()
    if _BASE_60.fullmatch(text):
        sign = -1 if text.startswith("-") else 1
        total = 0.0
        for part in text.lstrip("+-").replace("_", "").split(":"):
            total = total * 60 + float(part)
        meant = f"{sign * total:g}"
        return (f"should be a number, not the string {shown!r}: Kubernetes (and YAML 1.2) read {text} as text, "
                f"not as YAML 1.1's base 60; write {meant}")
    try:
        float(text)
    except ValueError:
        return f"should be a number, not the string {shown!r}"
    return (f"should be a number, not the string {shown!r}: write it without quotes "
            f"(the API server refuses a string here)")


@fast.memoized(maxsize=1024)  # one entry per model class
def _number_fields(cls: type[BaseModel]) -> dict[str, bool]:
    """The input keys (alias and name) of ``cls``'s number fields, each with whether it also admits a bool. A
    field that also admits a string (none does today) is not a number field here: its strings are meant."""
    out: dict[str, bool] = {}
    for name, field in cls.model_fields.items():
        if _numeric(field.annotation) and not _admits(field.annotation, str):
            for key in {name, field.alias or name}:
                out[key] = _admits(field.annotation, bool)
    return out


def _admits(annotation: Any, kind: type) -> bool:
    if annotation is kind:
        return True
    return any(_admits(a, kind) for a in typing.get_args(annotation))


class FieldError(ValueError):
    """A validator's error about one field of the model that raised it.

    pydantic reports an error raised in a model validator at the model itself; ``loc`` (camelCase names and
    list indexes, relative to that model) lets ``policyfile`` point at the offending field's line instead.
    pydantic keeps the exception object in the error's ``ctx``, which is how the location travels.
    """

    def __init__(self, message: str, *loc: str | int) -> None:
        super().__init__(message)
        self.loc: tuple[str | int, ...] = loc
