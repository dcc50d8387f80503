"""Kubernetes' field errors (apimachinery's `field.Error`) and the 422 `Invalid` Status they make:
what an API server answers when a write fails validation, word for word.

`spec.tenancy: Invalid value: "object": <detail>` is `<field>: <body>`; the Status message is
`<Kind>.<group> "<name>" is invalid: <error>`, or `[<error>, <error>]` for several (duplicates
once), and `details.causes` lists each error as {reason, message (the body), field}."""

import dataclasses
import json
from typing import Any

BLOCKING = {
    "FieldValueNotSupported",
    "FieldValueRequired",
    "FieldValueTooLong",
    "FieldValueTooMany",
    "FieldValueTypeInvalid",
}
"""Schema errors after which the API server does not evaluate CEL rules (`hasBlockingErr`)."""


@dataclasses.dataclass(frozen=True)
class FieldError:
    field: str
    """The path, as Kubernetes writes it: `spec.tenancy.tenants[0].name`."""
    type: str
    """The cause's reason: `FieldValueInvalid`, `FieldValueRequired`, ..."""
    body: str
    """What the error says without its field: `Invalid value: "object": <detail>`."""

    def __str__(self) -> str:
        return f"{self.field}: {self.body}"


def invalid(field: str, value: Any, detail: str, type_: str = "FieldValueInvalid") -> FieldError:
    return FieldError(field, type_, _with_detail(f"Invalid value: {go_value(value)}", detail))


def type_invalid(field: str, value: Any, detail: str) -> FieldError:
    return invalid(field, value, detail, "FieldValueTypeInvalid")


def required(field: str, detail: str = "") -> FieldError:
    return FieldError(field, "FieldValueRequired", _with_detail("Required value", detail))


def forbidden(field: str, detail: str) -> FieldError:
    return FieldError(field, "FieldValueForbidden", _with_detail("Forbidden", detail))


def not_supported(field: str, value: Any, supported: list[Any]) -> FieldError:
    values = ", ".join(go_value(item) for item in supported)
    body = f"Unsupported value: {go_value(value)}: supported values: {values}"
    return FieldError(field, "FieldValueNotSupported", body)


def too_long(field: str, max_length: int) -> FieldError:
    return FieldError(
        field, "FieldValueTooLong", f"Too long: may not be more than {max_length} bytes"
    )


def too_many(field: str, actual: int, max_items: int) -> FieldError:
    body = f"Too many: {actual}: must have at most {max_items} items"
    return FieldError(field, "FieldValueTooMany", body)


def duplicate(field: str, value: Any) -> FieldError:
    return FieldError(field, "FieldValueDuplicate", f"Duplicate value: {go_syntax(value)}")


def _with_detail(body: str, detail: str) -> str:
    return f"{body}: {detail}" if detail else body


def go_value(value: Any) -> str:
    """A bad value as `ErrorBody` prints it: numbers and booleans plain, strings quoted (%q),
    null as "null", anything else in Go syntax (%#v)."""
    return '"null"' if value is None else go_syntax(value)


def go_syntax(value: Any) -> str:
    """Go's %#v of a decoded JSON value: `map[string]interface {}{"name":"chat"}`."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() and abs(value) < 1e21 else repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, dict):
        entries = ", ".join(f"{json.dumps(k)}:{go_syntax(v)}" for k, v in sorted(value.items()))
        return f"map[string]interface {{}}{{{entries}}}"
    if isinstance(value, list):
        return f"[]interface {{}}{{{', '.join(go_syntax(item) for item in value)}}}"
    return "interface {}(nil)"


class Invalid(Exception):
    """A write the API server refuses as invalid: HTTP 422, reason `Invalid`."""

    status = 422
    reason = "Invalid"

    def __init__(self, kind: str, group: str, name: str, errors: list[FieldError]) -> None:
        self.errors = errors
        messages = list(dict.fromkeys(str(error) for error in errors))
        joined = messages[0] if len(messages) == 1 else f"[{', '.join(messages)}]"
        self.message = f'{kind}.{group} "{name}" is invalid: {joined}'
        causes = [{"reason": e.type, "message": e.body, "field": e.field} for e in errors]
        self.details = {"name": name, "group": group, "kind": kind, "causes": causes}
        super().__init__(self.message)
