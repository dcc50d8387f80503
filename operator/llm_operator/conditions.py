"""Status conditions in the standard Kubernetes shape (metav1.Condition)."""

import datetime
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

CONDITION_TYPES = (
    "ModelReady",
    "EngineReady",
    "RouterReady",
    "IngressReady",
    "GatewayReady",
    "Ready",
)
ConditionStatus = Literal["True", "False", "Unknown"]


class Condition(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, use_attribute_docstrings=True
    )

    type: str
    """ModelReady, EngineReady, RouterReady, IngressReady, GatewayReady or Ready."""
    status: ConditionStatus
    """True, False or Unknown."""
    reason: str = Field(pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
    """A CamelCase word for machines."""
    message: str = ""
    """What a person can do about it."""
    last_transition_time: str = Field(json_schema_extra={"format": "date-time"})
    """When status last changed."""
    observed_generation: int | None = None
    """The spec generation this condition was computed from."""


def now_rfc3339() -> str:
    return datetime.datetime.now(tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def merge_conditions(old: list[dict], new: list[Condition]) -> list[dict]:
    """The new conditions, keeping each one's lastTransitionTime when its status did not change."""
    old_by_type = {condition.get("type"): condition for condition in old}
    merged = []
    for condition in new:
        previous = old_by_type.get(condition.type)
        if previous is not None and previous.get("status") == condition.status:
            condition = condition.model_copy(
                update={"last_transition_time": previous.get("lastTransitionTime", now_rfc3339())}
            )
        merged.append(condition.model_dump(by_alias=True, exclude_none=True))
    return merged


def condition(type_: str, ok: bool, reason: str, message: str, generation: int | None) -> Condition:
    """A True/False condition stamped now (merge_conditions keeps the older time if unchanged)."""
    return Condition(
        type=type_,
        status="True" if ok else "False",
        reason=reason,
        message=message,
        last_transition_time=now_rfc3339(),
        observed_generation=generation,
    )


def conditions_of(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """An object's status conditions."""
    return list((body.get("status") or {}).get("conditions", []))


def condition_message(status: Mapping[str, Any], type_: str) -> str | None:
    """The message of the condition `type_` in a status, if it has one."""
    for item in status.get("conditions", []):
        if item.get("type") == type_:
            return item.get("message")
    return None
