"""A CRD's `x-kubernetes-validations` evaluated as kube-apiserver does, with a real CEL
implementation (the `common-expression-language` package: cel-rust; it has the three-argument
`map(x, filter, transform)` that the tenancy rule's messageExpression uses, which cel-python lacks).

Each rule runs where its schema node has a value, with `self` bound to that value; on an update a
rule that reads `oldSelf` runs only where the old object has a value at the same place
(correlated through object properties, map keys and the keys of `x-kubernetes-list-type: map`
lists, never through list indices), and never on a create. A rule that is not true is an
`Invalid value: "<the node's type>": <message>` error at the node's path (plus the rule's
`fieldPath`): the evaluated `messageExpression` when it yields a non-blank string, else `message`,
else `failed rule: <rule>`. A rule that fails to evaluate says why, as the API server does."""

import dataclasses
import functools
from typing import Any

import cel

from tests.k8s_operator import field_errors
from tests.k8s_operator.field_errors import FieldError

ABSENT: Any = object()
"""No value at this place (of the old object, or of the new one)."""
_RULES = "x-kubernetes-validations"


@dataclasses.dataclass(frozen=True)
class Rule:
    """One `x-kubernetes-validations` entry, compiled."""

    path: str
    """Where it sits in the schema: `spec.tenancy`, `spec.model.adapters[*]`."""
    rule: str
    program: Any  # cel.Program
    message: str
    message_program: Any  # cel.Program | None
    uses_old_self: bool
    field_path: str
    reason: str


@functools.cache
def _compile(expression: str) -> Any:
    return cel.compile(expression)


def compile_rule(entry: dict[str, Any], path: str) -> Rule:
    """Compile one entry (raises ValueError naming it when its rule or messageExpression does
    not parse), as the API server does when the CRD is written."""
    if entry.get("optionalOldSelf"):
        raise NotImplementedError(f"{path}: optionalOldSelf is not emulated")
    try:
        program = _compile(entry["rule"])
        expression = entry.get("messageExpression")
        message_program = _compile(expression) if expression else None
    except ValueError as error:
        raise ValueError(f"{path}: the rule {entry['rule']!r} does not compile: {error}") from None
    message = entry.get("message", "").strip() or f"failed rule: {entry['rule']}"
    return Rule(
        path=path,
        rule=entry["rule"],
        program=program,
        message=message,
        message_program=message_program,
        uses_old_self="oldSelf" in program.variables(),
        field_path=entry.get("fieldPath", "").lstrip("."),
        reason=entry.get("reason", "FieldValueInvalid"),
    )


def compile_rules(schema: dict[str, Any], path: str = "") -> list[Rule]:
    """Every rule of the schema, compiled, in the order `rule_errors` visits them."""
    rules = [compile_rule(entry, path or "<root>") for entry in schema.get(_RULES, [])]
    for key, child in schema.get("properties", {}).items():
        rules += compile_rules(child, _child(path, key))
    for key, marker in (("additionalProperties", "[*]"), ("items", "[*]")):
        if isinstance(schema.get(key), dict):
            rules += compile_rules(schema[key], path + marker)
    return rules


def cel_value(value: Any, schema: dict[str, Any]) -> Any:
    """The value as CEL sees it: a copy where a `type: number` field holds a double even when
    written as an integer (CEL does no arithmetic across int and double)."""
    if schema.get("type") == "number" and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, dict):
        known = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        extra = extra if isinstance(extra, dict) else {}
        return {key: cel_value(item, known.get(key, extra)) for key, item in value.items()}
    if isinstance(value, list):
        items = schema.get("items")
        return [cel_value(item, items if isinstance(items, dict) else {}) for item in value]
    return value


def rule_errors(value: Any, old: Any, schema: dict[str, Any], path: str = "") -> list[FieldError]:
    """The errors of every rule under `schema` for `value` (`old`: the stored value, or ABSENT)."""
    if value is ABSENT:
        return []
    errors = [
        error
        for entry in schema.get(_RULES, [])
        if (error := _check(compile_rule(entry, path), value, old, schema, path)) is not None
    ]
    for child_value, child_old, child_schema, child_path in _children(value, old, schema, path):
        errors += rule_errors(child_value, child_old, child_schema, child_path)
    return errors


def _children(value: Any, old: Any, schema: dict[str, Any], path: str) -> list[tuple[Any, ...]]:
    """(value, old value, schema, path) of each child with a schema: properties, map entries and
    list items (an item's old value: the old item with the same list-map keys)."""
    olds = old if isinstance(old, dict) else {}
    if isinstance(value, dict) and "properties" in schema:
        return [
            (value[key], olds.get(key, ABSENT), child, _child(path, key))
            for key, child in schema["properties"].items()
            if key in value
        ]
    if isinstance(value, dict) and isinstance(schema.get("additionalProperties"), dict):
        child = schema["additionalProperties"]
        return [(v, olds.get(k, ABSENT), child, f"{path}[{k}]") for k, v in value.items()]
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        old_items = _old_items(old, schema)
        items = schema["items"]
        return [
            (item, old_items.get(_item_key(item, schema), ABSENT), items, f"{path}[{index}]")
            for index, item in enumerate(value)
        ]
    return []


def _item_key(item: Any, schema: dict[str, Any]) -> Any:
    if schema.get("x-kubernetes-list-type") != "map" or not isinstance(item, dict):
        return ABSENT  # atomic lists and sets: an item has no old value
    return tuple(item.get(key) for key in schema.get("x-kubernetes-list-map-keys", []))


def _old_items(old: Any, schema: dict[str, Any]) -> dict[Any, Any]:
    items = old if isinstance(old, list) else []
    keyed = {_item_key(item, schema): item for item in items}
    keyed.pop(ABSENT, None)
    return keyed


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _check(
    rule: Rule, value: Any, old: Any, schema: dict[str, Any], path: str
) -> FieldError | None:
    if rule.uses_old_self and old is ABSENT:
        return None  # a transition rule: only on an update, where the old value exists
    activation = {"self": value} if old is ABSENT else {"self": value, "oldSelf": old}
    try:
        result = rule.program.execute(activation)
    except Exception as error:  # cel raises KeyError, TypeError, ... as the Go errors
        return field_errors.invalid(path, _type(schema), _evaluation_error(error, rule))
    if result is True:
        return None
    where = _child(path, rule.field_path) if rule.field_path else path
    return _violation(rule, where, _type(schema), _message(rule, activation))


def _message(rule: Rule, activation: dict[str, Any]) -> str:
    """The messageExpression's string; `message` when it fails, is no string, or is blank."""
    if rule.message_program is None:
        return rule.message
    try:
        message = rule.message_program.execute(activation)
    except Exception:  # the API server logs it and falls back to the message
        return rule.message
    if not isinstance(message, str) or not message.strip() or "\n" in message:
        return rule.message
    return message


def _violation(rule: Rule, path: str, type_: str, message: str) -> FieldError:
    if rule.reason == "FieldValueForbidden":
        return field_errors.forbidden(path, message)
    if rule.reason == "FieldValueRequired":
        return field_errors.required(path, message)
    return field_errors.invalid(path, type_, message)


def _type(schema: dict[str, Any]) -> str:
    """The bad value an API server names for a failed rule: the node's schema type."""
    return str(schema.get("type", ""))


def _evaluation_error(error: Exception, rule: Rule) -> str:
    if isinstance(error, KeyError):
        return f"no such key: {error.args[0]} evaluating rule: {rule.rule}"
    if "no such overload" in str(error).lower():
        return (
            "'no such overload': call arguments did not match a supported operator, function or"
            f" macro signature for rule: {rule.rule}"
        )
    return f"{error} evaluating rule: {rule.rule}"
