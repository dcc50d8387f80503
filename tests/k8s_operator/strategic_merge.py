"""Strategic merge patch, as kube-apiserver applies `application/strategic-merge-patch+json` to a
built-in kind, with the patch strategies of Kubernetes' own OpenAPI (the schemas bundled with
kubernetes-validate carry `x-kubernetes-patch-strategy` and `x-kubernetes-patch-merge-key`).

- A map merges key by key; null deletes a key; `$patch: replace` replaces the whole map with the
  rest of the patch's map, `$patch: delete` deletes it; `$retainKeys` keeps only the keys named.
- A list whose field has strategy `merge` and a merge key (containers by `name`, ports by
  `containerPort`, ...) merges item by item: an item whose key matches an existing one merges
  into it, a new one is appended, `{"$patch": "delete", <key>: ...}` removes one, and an item
  `{"$patch": "replace"}` makes the rest of the patch's list the whole list.
  `$setElementOrder/<field>` orders the result by the keys it lists.
- A list of scalars with strategy `merge` (finalizers) is a union;
  `$deleteFromPrimitiveList/<field>` removes values.
- Any other list, and every field the schema does not know, is replaced.

Custom resources have no strategic merge (the API server answers 415): the emulator says so."""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path
from typing import Any

import kubernetes_validate

from tests.k8s_operator.validation import KUBERNETES_VERSION

Obj = dict[str, Any]
DIRECTIVE = "$patch"
RETAIN_KEYS = "$retainKeys"
ORDER_PREFIX = "$setElementOrder/"
DELETE_PREFIX = "$deleteFromPrimitiveList/"


class PatchError(ValueError):
    """A patch the API server refuses as malformed (400 BadRequest)."""


@functools.cache
def _definitions() -> dict[str, Obj]:
    root = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
    path = root / f"v{KUBERNETES_VERSION}-local" / "_definitions.json"
    definitions: dict[str, Obj] = json.loads(path.read_text())["$defs"]
    return definitions


@functools.cache
def _definition_of(api_version: str, kind: str) -> str | None:
    group, _, version = api_version.rpartition("/")
    for name, definition in _definitions().items():
        for gvk in definition.get("x-kubernetes-group-version-kind", []):
            if (gvk.get("group", ""), gvk.get("version"), gvk.get("kind")) == (
                group,
                version,
                kind,
            ):
                return name
    return None


def is_built_in(api_version: str, kind: str) -> bool:
    return _definition_of(api_version, kind) is not None


def strategic_merge(old: Obj, patch: Obj) -> Obj:
    """`old` with `patch` applied as the API server applies a strategic merge patch to its kind
    (named by `old`'s apiVersion and kind)."""
    name = _definition_of(old.get("apiVersion", ""), old.get("kind", ""))
    schema = {"$ref": f"#/$defs/{name}"} if name else {}
    return _merge_map(copy.deepcopy(old), copy.deepcopy(patch), schema)


def _resolve(schema: Obj) -> Obj:
    ref = schema.get("$ref")
    return _definitions()[ref.rsplit("/", 1)[1]] if ref else schema


def _merge_map(old: Obj, patch: Obj, schema: Obj) -> Obj:
    directive = patch.pop(DIRECTIVE, None)
    if directive == "replace":
        return _strip_directives(patch)
    if directive not in (None, "merge"):
        raise PatchError(f"unknown patch type: {directive!r} in map")
    retain = patch.pop(RETAIN_KEYS, None)
    properties = _resolve(schema).get("properties", {})
    orders: dict[str, list[Any]] = {}
    for key in [k for k in patch if k.startswith((ORDER_PREFIX, DELETE_PREFIX))]:
        field, value = key.split("/", 1)[1], patch.pop(key)
        if key.startswith(DELETE_PREFIX):
            old[field] = [v for v in old.get(field) or [] if v not in value]
        else:
            orders[field] = value
    for key, value in patch.items():
        field_schema = properties.get(key, {})
        if value is None or (isinstance(value, dict) and _is_delete(value)):
            old.pop(key, None)
        elif isinstance(value, dict) and isinstance(old.get(key), dict):
            old[key] = _merge_map(old[key], value, field_schema)
        elif isinstance(value, list):
            old[key] = _merge_list(old.get(key), value, field_schema)
        else:
            old[key] = _strip_directives(value)
    for field, order in orders.items():
        old[field] = _ordered(old.get(field) or [], order, properties.get(field, {}))
    if retain is not None:
        old = {k: v for k, v in old.items() if k in retain}
    return old


def _is_delete(value: Obj) -> bool:
    return value.get(DIRECTIVE) == "delete" and len(value) == 1


def _merge_list(old: list[Any] | None, patch: list[Any], schema: Obj) -> list[Any]:
    strategy = (schema.get("x-kubernetes-patch-strategy") or "").split(",")
    key = schema.get("x-kubernetes-patch-merge-key")
    if "merge" not in strategy or old is None:
        return [_strip_directives(v) for v in patch if not _is_directive_item(v)]
    if any(isinstance(v, dict) and v.get(DIRECTIVE) == "replace" for v in patch):
        return [_strip_directives(v) for v in patch if not _is_directive_item(v)]
    if key is None:  # a list of scalars: a union
        return old + [v for v in patch if v not in old]
    items = _resolve(schema.get("items", {}))
    merged = list(old)
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            raise PatchError(f"map: {item!r} does not contain declared merge key: {key}")
        index = next((i for i, o in enumerate(merged) if o.get(key) == item[key]), None)
        if item.get(DIRECTIVE) == "delete":
            if index is not None:
                del merged[index]
        elif index is None:
            merged.append(_strip_directives(item))
        else:
            merged[index] = _merge_map(merged[index], item, items)
    return merged


def _is_directive_item(value: Any) -> bool:
    return isinstance(value, dict) and DIRECTIVE in value and len(value) == 1


def _ordered(values: list[Any], order: list[Any], schema: Obj) -> list[Any]:
    key = schema.get("x-kubernetes-patch-merge-key")

    def rank(value: Any) -> int:
        wanted = value.get(key) if key and isinstance(value, dict) else value
        return order.index(wanted) if wanted in order else len(order)

    return sorted(values, key=rank)


def _strip_directives(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: _strip_directives(v)
            for k, v in value.items()
            if k != DIRECTIVE and k != RETAIN_KEYS and not k.startswith("$")
        }
    if isinstance(value, list):
        return [_strip_directives(v) for v in value]
    return value
