"""The base of every policy-language model: camelCase field names, unknown fields rejected, immutable."""

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class SpecModel(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True)


class FieldError(ValueError):
    """A validator's error about one field of the model that raised it.

    pydantic reports an error raised in a model validator at the model itself; ``loc`` (camelCase names and
    list indexes, relative to that model) lets ``policyfile`` point at the offending field's line instead.
    pydantic keeps the exception object in the error's ``ctx``, which is how the location travels.
    """

    def __init__(self, message: str, *loc: str | int) -> None:
        super().__init__(message)
        self.loc: tuple[str | int, ...] = loc
