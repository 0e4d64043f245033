"""The speed tricks of replay, simulation and policy loading, in one place, each with the plain equivalent it
stands for (``tests/core/test_fastpaths.py`` checks they agree; ``bench/fastpaths.py`` measures what each buys).

- ``quick_init``: a faster ``__init__`` for frozen, slotted dataclasses built hundreds of thousands of times;
- ``collector_paused``: the cyclic garbage collector off while a loop builds many long-lived objects that form
  no reference cycles (each collection would traverse all of them again as they pile up), and what the block
  built handed to the oldest generation when it ends (``gc.freeze`` then ``gc.unfreeze``);
- ``memoized``: a bounded cache of a pure function of hashable arguments (policy expressions parsed once per
  text, however many validators and policies ask).

Nothing else in the project disables the collector, freezes it, rewrites an ``__init__`` or caches a parse.
"""

from __future__ import annotations

import dataclasses
import functools
import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, cast

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

_T = TypeVar("_T", bound="DataclassInstance")
_P = ParamSpec("_P")
_R = TypeVar("_R")


class _Factory:
    """The default of a parameter whose field has a ``default_factory`` (shown as dataclasses shows it)."""

    def __repr__(self) -> str:
        return "<factory>"


_NO_DEFAULT = _Factory()


def quick_init(cls: type[_T]) -> type[_T]:
    """Give a frozen, slotted dataclass an ``__init__`` that fills its slots through their descriptors.

    The ``__init__`` ``dataclass`` generates for a frozen class calls ``object.__setattr__`` once per field,
    which makes building one of these small objects cost several times a mutable one; replay and simulation
    build hundreds of thousands. Setting the slots through their member descriptors does the same thing at
    about half the cost. Same signature, defaults and default factories, same object: only for classes without
    ``__post_init__``, ``InitVar`` or keyword-only fields (checked here). Public: the policy types' ``Context`` and
    ``Recommendation`` and the replay's ``Step``, also built once per evaluation, use it too.
    """
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or not hasattr(cls, "__slots__") or hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__}: quick_init is for frozen, slotted dataclasses without __post_init__")
    namespace: dict[str, Any] = {"_NO_DEFAULT": _NO_DEFAULT}
    args: list[str] = []
    body: list[str] = []
    for f in dataclasses.fields(cls):
        if not f.init or f.kw_only:
            raise TypeError(f"{cls.__name__}.{f.name}: quick_init supports plain positional fields only")
        namespace[f"_set_{f.name}"] = cls.__dict__[f.name].__set__
        if f.default is not dataclasses.MISSING:
            namespace[f"_default_{f.name}"] = f.default
            args.append(f"{f.name}=_default_{f.name}")
        elif f.default_factory is not dataclasses.MISSING:
            namespace[f"_factory_{f.name}"] = f.default_factory
            args.append(f"{f.name}=_NO_DEFAULT")
            body.append(f"    if {f.name} is _NO_DEFAULT:\n        {f.name} = _factory_{f.name}()")
        else:
            args.append(f.name)
        body.append(f"    _set_{f.name}(self, {f.name})")
    exec(f"def __init__(self, {', '.join(args)}):\n" + "\n".join(body) + "\n", namespace)
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__doc__ = cls.__init__.__doc__
    setattr(cls, "__init__", init)  # noqa: B010 (mypy forbids assigning a method)
    return cls


@contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off inside the block, back as it was after (also on an exception).

    Reference counting still frees everything that is not in a cycle; cycles made inside the block are
    collected once it ends. For loops that build many objects and keep them (replay rows, loaded policies)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            # Everything the block allocated sits in the youngest generation: the first collection after it
            # would traverse all of it (0.3-0.5 s for 5,000 policies), and the next ones again as it ages.
            # freeze + unfreeze moves every tracked object into the oldest generation in constant time (it
            # splices lists); nothing is leaked: garbage cycles there are freed at the next full collection,
            # which the collector's own rule (pending > 25 % of the long-lived) schedules as always.
            gc.freeze()
            gc.unfreeze()
            gc.enable()


def memoized(maxsize: int) -> Callable[[Callable[_P, _R]], Callable[_P, _R]]:
    """``functools.lru_cache(maxsize)``: for pure functions whose result is never mutated by a caller.

    Exceptions are not cached (a refused input is refused again, with the same message). The plain equivalent
    is calling the function each time; ``tests/core/test_fastpaths.py`` checks the answers agree."""

    def wrap(fn: Callable[_P, _R]) -> Callable[_P, _R]:
        cached: Any = functools.lru_cache(maxsize=maxsize)(fn)
        return functools.update_wrapper(cast(Callable[_P, _R], cached), fn)

    return wrap
