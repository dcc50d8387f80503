"""Field paths and field sets as server-side apply tracks them (structured-merge-diff's
`fieldpath`): which fields of an object a manager owns, and the `fieldsV1` form that
`metadata.managedFields` stores them in.

A path is a tuple of path elements, each a string as fieldsV1 spells it: `f:<field>` (a field of
a map), `k:<json of the key fields>` (an item of a list of type `map`, keyed by its
`x-kubernetes-list-map-keys`), `v:<json of the value>` (an item of a list of type `set`).
The members of an object are its leaves (scalars, empty maps and lists, atomic lists) and the
items of its associative lists; a non-empty map is not a member, its fields are.

The schema says how a list is merged and tracked: `x-kubernetes-list-type` (`map` with its keys,
`set`, `atomic`), or, for a built-in kind without one, `x-kubernetes-patch-merge-key`; a list the
schema does not describe is atomic, as structured-merge-diff deduces for an unknown type."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from tests.k8s_operator.strategic_merge import _definition_of, _definitions

Obj = dict[str, Any]
Path = tuple[str, ...]
ITEM = object()
"""The value of a list item's own path (it exists; its fields are paths of their own)."""
OBJECT_META = {"$ref": "#/$defs/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}


def schema_of(obj: Obj, custom: Obj | None = None) -> Obj:
    """The schema of a built-in kind (Kubernetes' OpenAPI), else the custom resource's
    (`custom`, its CRD's openAPIV3Schema, with ObjectMeta under metadata), else none."""
    name = _definition_of(obj.get("apiVersion", ""), obj.get("kind", ""))
    if name is not None:
        return {"$ref": f"#/$defs/{name}"}
    if custom is None:
        return {"properties": {"metadata": OBJECT_META}}
    properties = {**custom.get("properties", {}), "metadata": OBJECT_META}
    return {**custom, "properties": properties}


def _resolve(schema: Obj) -> Obj:
    ref = schema.get("$ref")
    return _definitions()[ref.rsplit("/", 1)[1]] if ref else schema


def field_schema(schema: Obj, key: str) -> Obj:
    resolved = _resolve(schema)
    known = resolved.get("properties", {})
    if key in known:
        return dict(known[key])
    extra = resolved.get("additionalProperties")
    return dict(extra) if isinstance(extra, dict) else {}


def item_schema(schema: Obj) -> Obj:
    items = _resolve(schema).get("items")
    return dict(items) if isinstance(items, dict) else {}


def list_type(schema: Obj) -> tuple[str, list[str]]:
    """(`map`, its keys), (`set`, []) or (`atomic`, [])."""
    resolved = _resolve(schema)
    kind = resolved.get("x-kubernetes-list-type")
    merge_key = resolved.get("x-kubernetes-patch-merge-key")
    if kind == "map":
        return "map", list(resolved.get("x-kubernetes-list-map-keys") or [merge_key])
    if kind is None and merge_key:
        return "map", [merge_key]
    if kind == "set":
        return "set", []
    return "atomic", []


def item_key(item: Any, keys: list[str]) -> str | None:
    """The path element of an associative list's item (None: not a map with a key field)."""
    if not isinstance(item, dict) or not any(key in item for key in keys):
        return None
    fields = {key: item[key] for key in sorted(keys) if key in item}
    return "k:" + json.dumps(fields, separators=(",", ":"))


def value_key(item: Any) -> str:
    return "v:" + json.dumps(item, separators=(",", ":"), sort_keys=True)


def members(value: Any, schema: Obj, prefix: Path = ()) -> dict[Path, Any]:
    """Every member path of a map (an object or a part of one) with its value."""
    found: dict[Path, Any] = {}
    for key, child in value.items():
        path = (*prefix, f"f:{key}")
        found.update(_members_of(child, field_schema(schema, key), path))
    return found


def _members_of(value: Any, schema: Obj, path: Path) -> dict[Path, Any]:
    if isinstance(value, dict) and value:
        return members(value, schema, path)
    if not isinstance(value, list) or not value:
        return {path: value}
    kind, keys = list_type(schema)
    if kind == "set":
        return {(*path, value_key(item)): item for item in value}
    keyed = [item_key(item, keys) for item in value] if kind == "map" else [None]
    if None in keyed:
        return {path: value}  # atomic
    found: dict[Path, Any] = {}
    for element, item in zip(keyed, value, strict=True):
        assert element is not None
        found[(*path, element)] = ITEM
        found.update(members(item, item_schema(schema), (*path, element)))
    return found


def changed(old: Obj, new: Obj, schema: Obj) -> set[Path]:
    """The member paths added, modified or removed from `old` to `new`."""
    before, after = members(old, schema), members(new, schema)
    removed = before.keys() - after.keys()
    return removed | {p for p, value in after.items() if p not in before or before[p] != value}


def to_fields_v1(paths: set[Path]) -> Obj:
    """The fieldsV1 tree: a member with children of its own gets `.` among them."""
    tree: Obj = {}
    for path in sorted(paths):
        node = tree
        for element in path:
            node = node.setdefault(element, {})
    for path in paths:
        node = tree
        for element in path:
            node = node[element]
        if node and "." not in node:
            node["."] = {}
    return tree


def from_fields_v1(tree: Obj, prefix: Path = ()) -> set[Path]:
    paths: set[Path] = set()
    for element, child in tree.items():
        if element == ".":
            paths.add(prefix)
        elif not child:
            paths.add((*prefix, element))
        else:
            paths |= from_fields_v1(child, (*prefix, element))
    return paths


def path_string(path: Path) -> str:
    """As the API server prints a path in a conflict: `.spec.containers[name="engine"].image`."""
    text = ""
    for element in path:
        kind, rest = element[0], element[2:]
        if kind == "f":
            text += f".{rest}"
        elif kind == "k":
            fields = json.loads(rest)
            text += "[" + ",".join(f"{k}={json.dumps(v)}" for k, v in fields.items()) + "]"
        elif kind == "v":
            text += f"[={rest}]"
        else:
            text += f"[{rest}]"
    return text


def remove_path(obj: Obj, path: Path) -> None:
    """Remove the member at `path` from `obj`, in place (nothing when it is not there)."""
    parents = list(_walk(obj, path[:-1]))
    if len(parents) != len(path) - 1 + 1:
        return
    container, last = parents[-1], path[-1]
    if last.startswith("f:") and isinstance(container, dict):
        container.pop(last[2:], None)
    elif isinstance(container, list):
        index = _find(container, last)
        if index is not None:
            del container[index]


def _walk(value: Any, path: Path) -> Iterator[Any]:
    """`value`, then each container along `path`, as far as it exists."""
    yield value
    for element in path:
        if element.startswith("f:") and isinstance(value, dict) and element[2:] in value:
            value = value[element[2:]]
        elif isinstance(value, list) and (index := _find(value, element)) is not None:
            value = value[index]
        else:
            return
        yield value


def _find(items: list[Any], element: str) -> int | None:
    for index, item in enumerate(items):
        if element.startswith("v:") and value_key(item) == element:
            return index
        if element.startswith("k:") and isinstance(item, dict):
            fields = json.loads(element[2:])
            if item_key(item, list(fields)) == element:
                return index
    return None
