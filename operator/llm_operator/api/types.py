"""The building blocks of the spec models: camelCase models, Kubernetes quantities, embedded raw
objects, sections that default to their own defaults, and CEL rules."""

import re
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from pagedock.errors import ConfigError
from pagedock.speculative_config import SpeculativeConfig

QUANTITY_RE = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+|[numkMGTPE]i?|Ki|k)?$")


def _check_quantity(value: int | str) -> int | str:
    if isinstance(value, str) and not QUANTITY_RE.match(value):
        raise ValueError(f"{value!r} is not a Kubernetes quantity (e.g. 512Mi, 2, 500m)")
    return value


Quantity = Annotated[
    int | str,
    AfterValidator(_check_quantity),
    Field(json_schema_extra={"x-kubernetes-int-or-string": True, "pattern": QUANTITY_RE.pattern}),
]


def _check_speculative_config(value: str) -> str:
    try:  # the engine's own reading of it, so a bad one never reaches a pod
        SpeculativeConfig.parse(value)
    except ConfigError as e:
        raise ValueError(str(e)) from None
    return value


# vLLM's --speculative-config JSON, passed to the engine as written.
SpeculativeConfigJson = Annotated[str, AfterValidator(_check_speculative_config)]
# Kubernetes objects embedded as is (tolerations, affinity, env vars, network peers).
RawObject = Annotated[
    dict[str, Any], Field(json_schema_extra={"x-kubernetes-preserve-unknown-fields": True})
]


def section(model: type[BaseModel]) -> Any:
    """A nested object that defaults to all of its own defaults (CRD `default: {}`)."""
    return Field(default_factory=model, json_schema_extra={"default": {}})


def cel_rules(*rules: tuple[str, str]) -> ConfigDict:
    """CEL validations (rule, message) that the API server checks on this object."""
    validations: Any = [{"rule": rule, "message": message} for rule, message in rules]
    return ConfigDict(json_schema_extra={"x-kubernetes-validations": validations})


class SpecModel(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        use_attribute_docstrings=True,
    )
