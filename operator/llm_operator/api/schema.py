"""pydantic JSON Schema -> a Kubernetes *structural* openAPIV3Schema.

Structural means: every node has a `type` (or `x-kubernetes-int-or-string` /
`x-kubernetes-preserve-unknown-fields`), no `$ref`, no `anyOf` of types, no
`additionalProperties` beside `properties`, no `null` type. This converter inlines `$defs`,
folds `X | None` into an optional X, folds `int | str` into int-or-string, writes exclusive bounds
the OpenAPI v3.0 way (`minimum: 0, exclusiveMinimum: true`; JSON Schema's is a number), writes a
one-value `Literal` (pydantic's `const`) as a one-value `enum`, and drops what Kubernetes does not
take (titles, null defaults).
"""

from typing import Any

from pydantic import BaseModel

JSONSchema = dict[str, Any]
DROPPED_KEYS = frozenset({"title", "$defs", "additionalProperties", "anyOf", "$ref"})


def openapi_schema(model: type[BaseModel]) -> JSONSchema:
    """The structural openAPIV3Schema of a pydantic model (by alias, as users write it)."""
    schema = model.model_json_schema(by_alias=True, mode="validation")
    return _convert(schema, schema.get("$defs", {}))


def _convert(node: JSONSchema, defs: dict[str, JSONSchema]) -> JSONSchema:
    node = _resolve(node, defs)
    # NOTE: lists copied: a $defs entry used twice must not share one (YAML would alias it).
    out: JSONSchema = {
        key: list(value) if isinstance(value, list) else value
        for key, value in node.items()
        if key not in DROPPED_KEYS
    }
    if out.get("default", 0) is None:
        del out["default"]
    if "const" in out:  # Kubernetes' schema has no const
        out["enum"] = [out.pop("const")]
    for exclusive, bound in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if not isinstance(out.get(exclusive, True), bool):
            out[bound], out[exclusive] = out[exclusive], True
    if "properties" in node:
        out["properties"] = {k: _convert(v, defs) for k, v in node["properties"].items()}
    if "items" in node:
        out["items"] = _convert(node["items"], defs)
    extra = node.get("additionalProperties")
    if isinstance(extra, dict):
        out["additionalProperties"] = _convert(extra, defs)
    if out.get("x-kubernetes-preserve-unknown-fields") or "properties" in out:
        out.setdefault("type", "object")
    if out.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
    return out


def _resolve(node: JSONSchema, defs: dict[str, JSONSchema]) -> JSONSchema:
    """Inline a `$ref` and fold a nullable or int-or-string `anyOf` into one schema node."""
    if "$ref" in node:
        target = defs[node["$ref"].rsplit("/", 1)[-1]]
        node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    if "anyOf" not in node:
        return node
    if node.get("x-kubernetes-int-or-string"):
        return node
    branches = [branch for branch in node["anyOf"] if branch.get("type") != "null"]
    if len(branches) != 1:
        types = {branch.get("type") for branch in branches}
        if types == {"integer", "string"}:
            return {**node, "x-kubernetes-int-or-string": True}
        raise ValueError(f"cannot express a union of {types} in a structural schema")
    siblings = {k: v for k, v in node.items() if k != "anyOf"}
    return _resolve({**branches[0], **siblings}, defs)
