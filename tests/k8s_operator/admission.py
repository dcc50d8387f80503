"""Custom-resource admission as kube-apiserver does it for a CRD with a structural schema: what a
create, an update or a patch (the merged result) of a custom resource goes through before it is
stored.

1. Pruning: a field the schema does not know is dropped (apiVersion, kind and metadata at the
   root stay, and so does anything under `x-kubernetes-preserve-unknown-fields: true`), and so is
   a null where the schema does not say `nullable`.
2. Defaulting: a property with a `default` that is absent gets a copy of it, then the defaults
   under every present object apply, recursively: `spec: {default: {}}` fills in all of spec's.
3. Validation: the OpenAPI schema (jsonschema, as validation.py), the uniqueness of
   `x-kubernetes-list-type: map` and `set` lists, then, unless a schema error blocks them (a
   missing, unsupported, too long or mistyped value, as the API server's `hasBlockingErr`), every
   `x-kubernetes-validations` rule with a real CEL implementation (cel_rules.py).

An error refuses the write with the API server's 422 `Invalid` Status (field_errors.py).
Not emulated: ObjectMeta validation, string formats (date-time), ratcheting (an unchanged invalid
value passing on update), CEL cost limits, embedded resources, and `fieldValidation=Strict` (an
unknown field is always pruned, never refused)."""

import copy
import json
from collections.abc import Iterator
from typing import Any

import jsonschema

from tests.k8s_operator import cel_rules, field_errors
from tests.k8s_operator.field_errors import BLOCKING, FieldError, Invalid
from tests.k8s_operator.validation import crd_json_schema

ROOT_FIELDS = ("apiVersion", "kind", "metadata")
NOT_CHECKED = (
    "some validation rules were not checked because the object was invalid; correct the existing"
    " errors to complete validation"
)
# kube-openapi's wording of a schema error, after `<path> in body ` ({bound}: the schema's value).
DETAILS = {
    "minimum": "should be greater than or equal to {bound}",
    "exclusiveMinimum": "should be greater than {bound}",
    "maximum": "should be less than or equal to {bound}",
    "exclusiveMaximum": "should be less than {bound}",
    "pattern": "should match '{bound}'",
    "minLength": "should be at least {bound} chars long",
    "minItems": "should have at least {bound} items",
    "minProperties": "should have at least {bound} properties",
    "maxProperties": "should have at most {bound} properties",
    "multipleOf": "should be a multiple of {bound}",
    "uniqueItems": "shouldn't contain duplicates",
}
JSON_TYPES: dict[type, str] = {
    dict: "object",
    list: "array",
    str: "string",
    bool: "boolean",
    int: "integer",
    float: "number",
    type(None): "null",
}


class Admission:
    """Admission of one CRD's custom resources (its storage version's schema)."""

    def __init__(self, crd: dict[str, Any]) -> None:
        [version] = [v for v in crd["spec"]["versions"] if v.get("storage")]
        self.kind: str = crd["spec"]["names"]["kind"]
        self.group: str = crd["spec"]["group"]
        self.schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
        self.rules = cel_rules.compile_rules(self.schema)
        """Every CEL rule, compiled when the CRD is read (a rule that does not compile fails)."""
        closed = crd_json_schema(self.schema)
        for name, type_ in zip(ROOT_FIELDS, ("string", "string", "object"), strict=True):
            closed.setdefault("properties", {}).setdefault(name, {"type": type_})  # always known
        self._validator = jsonschema.Draft202012Validator(closed)

    def admit(
        self, obj: dict[str, Any], old: dict[str, Any] | None = None, rules: bool = True
    ) -> dict[str, Any]:
        """The object as the API server stores it (pruned, defaulted), or Invalid. `old`: the
        stored object of an update (transition rules see it as `oldSelf`); `rules=False` skips
        the CEL rules (a status write: every rule here is on spec)."""
        admitted = copy.deepcopy(obj)
        prune(admitted, self.schema, root=True)
        default(admitted, self.schema)
        errors = self.schema_errors(admitted) + list_errors(admitted, self.schema)
        if rules and any(error.type in BLOCKING for error in errors):
            errors.append(field_errors.invalid("<nil>", None, NOT_CHECKED))
        elif rules:
            errors += self.rule_errors(admitted, old)
        if errors:
            name = admitted.get("metadata", {}).get("name", "")
            raise Invalid(self.kind, self.group, name, errors)
        return admitted

    def rule_errors(self, obj: dict[str, Any], old: dict[str, Any] | None) -> list[FieldError]:
        value = cel_rules.cel_value(obj, self.schema)
        was = cel_rules.ABSENT if old is None else cel_rules.cel_value(old, self.schema)
        return cel_rules.rule_errors(value, was, self.schema)

    def schema_errors(self, obj: dict[str, Any]) -> list[FieldError]:
        errors = sorted(self._validator.iter_errors(obj), key=lambda e: list(map(str, e.path)))
        # NOTE: jsonschema reports `required` once per missing property, each naming them all.
        found = [field_error for error in errors for field_error in schema_error(error)]
        return list(dict.fromkeys(found))


def prune(value: Any, schema: dict[str, Any], root: bool = False) -> None:
    """Drop, in place, what the schema does not know, and nulls it does not allow."""
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            prune(item, schema["items"])
    if not isinstance(value, dict):
        return
    known = schema.get("properties", {})
    extra = schema.get("additionalProperties")
    for key in list(value):
        if root and key in ROOT_FIELDS:
            continue
        child = known.get(key, extra if isinstance(extra, dict) else None)
        if child is None:
            if not schema.get("x-kubernetes-preserve-unknown-fields"):
                del value[key]
        elif value[key] is None and not child.get("nullable"):
            del value[key]  # a default, if any, takes its place
        else:
            prune(value[key], child)


def default(value: Any, schema: dict[str, Any]) -> None:
    """Apply, in place, the defaults of absent properties, then those under every value."""
    if isinstance(value, dict):
        for key, child in schema.get("properties", {}).items():
            if key not in value and "default" in child:
                value[key] = copy.deepcopy(child["default"])
    for _, child_value, child_schema in children(value, schema):
        default(child_value, child_schema)


def children(value: Any, schema: dict[str, Any]) -> Iterator[tuple[str, Any, dict[str, Any]]]:
    """(path step, value, schema) of each child the schema describes: `.name`, `[key]`, `[0]`."""
    if isinstance(value, dict):
        known = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            if key in known:
                yield f".{key}", item, known[key]
            elif isinstance(extra, dict):
                yield f"[{key}]", item, extra
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            yield f"[{index}]", item, schema["items"]


def list_errors(value: Any, schema: dict[str, Any], path: str = "") -> list[FieldError]:
    """An item of an `x-kubernetes-list-type: map` list whose keys an earlier item has, or of a
    `set` list equal to an earlier one: `Duplicate value`."""
    errors = []
    list_type = schema.get("x-kubernetes-list-type")
    if isinstance(value, list) and list_type in ("map", "set"):
        keys = schema.get("x-kubernetes-list-map-keys", [])
        seen = set()
        for index, item in enumerate(value):
            identity = {key: item.get(key) for key in keys} if list_type == "map" else item
            marker = json.dumps(identity, sort_keys=True)
            if marker in seen:
                errors.append(field_errors.duplicate(f"{path}[{index}]", identity))
            seen.add(marker)
    for step, child_value, child_schema in children(value, schema):
        errors += list_errors(child_value, child_schema, (path + step).lstrip("."))
    return errors


def schema_error(error: jsonschema.ValidationError) -> list[FieldError]:
    """A jsonschema error as the API server words it (kube-openapi's messages)."""
    path = "".join(f"[{step}]" if isinstance(step, int) else f".{step}" for step in error.path)
    path = path.lstrip(".")
    value, bound = error.instance, error.validator_value
    if error.validator == "required":
        prefix = f"{path}." if path else ""
        return [field_errors.required(prefix + name) for name in bound if name not in value]
    if error.validator == "enum":
        return [field_errors.not_supported(path, value, bound)]
    if error.validator == "type":
        actual = JSON_TYPES[type(value)]
        detail = f"{path} in body must be of type {bound}: {json.dumps(actual)}"
        return [field_errors.type_invalid(path, actual, detail)]
    if error.validator == "maxLength":
        return [field_errors.too_long(path, bound)]
    if error.validator == "maxItems":
        return [field_errors.too_many(path, len(value), bound)]
    if error.validator in DETAILS:
        shown = bound if isinstance(bound, str) else field_errors.go_syntax(bound)
        detail = f"{path} in body {DETAILS[str(error.validator)].format(bound=shown)}"
        return [field_errors.invalid(path, value, detail)]
    return [field_errors.invalid(path, value, error.message)]
