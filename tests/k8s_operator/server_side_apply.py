"""Server-side apply (`PATCH` with `Content-Type: application/apply-patch+yaml`) as the API server
does it: the applied configuration is merged into the live object (maps field by field, lists of
type `map` item by item by their keys, `set` lists as a union, any other list replaced), and the
manager's `Apply` entry in managedFields becomes exactly the fields it applied (field_paths.py).

- A conflict: the apply changes a field another manager owns (to another value) -> 409
  `Conflict`, a `FieldManagerConflict` cause per field naming the manager; with `force=true` the
  ownership moves to the applier instead. Applying a value another manager has too shares it.
- A field the manager applied before and applies no more is removed, unless another manager
  still owns it.
- An object that does not exist is created from the configuration.
- `fieldManager` is required (400 without it).

The Status the API server answers for a conflict, its `message` (`Apply failed with 1 conflict:
conflict with "kubectl" using apps/v1: .spec.replicas`) and causes, are the API server's."""

from __future__ import annotations

import copy
import json
from typing import Any

import yaml

from tests.k8s_operator.field_paths import (
    Obj,
    Path,
    changed,
    field_schema,
    item_key,
    item_schema,
    list_type,
    members,
    path_string,
    remove_path,
)
from tests.k8s_operator.managed_fields import (
    Entry,
    Scope,
    keep_present,
    now,
    read,
    without_managed_fields,
    write,
)

APPLY = "application/apply-patch+yaml"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
NO_MANAGER = (
    'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply'
    " patch"
)


class ApplyError(Exception):
    """A refused apply: the API server's status, reason, message and details."""

    def __init__(self, status: int, reason: str, message: str, details: Obj) -> None:
        super().__init__(message)
        self.status_args = (status, reason, message, details)


def configuration(body: Any, text: str) -> Obj:
    """The applied configuration: the body as JSON, else as YAML (400 when neither is a map)."""
    config = body if isinstance(body, dict) else _yaml(text)
    if not isinstance(config, dict) or not config.get("apiVersion") or not config.get("kind"):
        raise ApplyError(400, "BadRequest", "error decoding YAML: apiVersion and kind are set", {})
    return config


def _yaml(text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ApplyError(400, "BadRequest", f"error decoding YAML: {error}", {}) from None


def apply(
    live: Obj | None, config: Obj, manager: str, scope: Scope, schema: Obj, force: bool
) -> Obj:
    """The object after `manager` applies `config` to `live` (None: create it), with its
    managedFields; ApplyError (409) on a conflict that `force` does not override."""
    if not manager:
        raise ApplyError(400, "BadRequest", NO_MANAGER, {})
    config = _within(without_managed_fields(config), scope)
    applied = scope.owned(set(members(config, schema)))
    entries = read(live)
    identity = (manager, "Apply", scope.subresource)
    others = [e for e in entries if e.identity != identity]
    if live is None:
        new = copy.deepcopy(config)
    else:
        base = without_managed_fields(live)
        new = merge(base, config, schema)
        allowed = _last_applied(live, manager, scope, schema)
        _take_ownership(others, scope.owned(changed(base, new, schema)), force, allowed)
        previous = next((e.paths for e in entries if e.identity == identity), set())
        _remove_unapplied(new, previous - applied, others, applied)
    mine = Entry(manager, "Apply", config["apiVersion"], scope.subresource, applied, now())
    entries = [*others, mine]
    keep_present(entries, without_managed_fields(new), schema)
    write(new, entries)
    return new


def _within(config: Obj, scope: Scope) -> Obj:
    """What an apply to this endpoint may set: status only through /status."""
    if scope.subresource == "status":
        return {
            k: v for k, v in config.items() if k in ("apiVersion", "kind", "metadata", "status")
        }
    if scope.status_apart:
        config.pop("status", None)
    return config


def _last_applied(live: Obj, manager: str, scope: Scope, schema: Obj) -> set[Path]:
    """The fields of a client-side apply's last-applied-configuration, which an apply by kubectl
    may take from their managers without a conflict (the API server's migration help)."""
    text = (live.get("metadata", {}).get("annotations") or {}).get(LAST_APPLIED)
    if not manager.startswith("kubectl") or not text:
        return set()
    try:
        return scope.owned(set(members(json.loads(text), schema)))
    except (ValueError, AttributeError):
        return set()


def _take_ownership(
    others: list[Entry], touched: set[Path], force: bool, allowed: set[Path]
) -> None:
    conflicts = [(entry, path) for entry in others for path in sorted(entry.paths & touched)]
    if any(path not in allowed for _, path in conflicts) and not force:
        raise conflict_error([(entry, path) for entry, path in conflicts if path not in allowed])
    for entry in others:
        entry.paths -= touched


def _remove_unapplied(
    new: Obj, dropped: set[Path], others: list[Entry], applied: set[Path]
) -> None:
    """Remove what the manager no longer applies and nobody else owns (deepest first)."""
    kept = applied.union(*(entry.paths for entry in others))
    for path in sorted(dropped, key=len, reverse=True):
        if not any(owned[: len(path)] == path for owned in kept):
            remove_path(new, path)


def merge(live: Any, config: Any, schema: Obj) -> Any:
    """`config` merged into `live` (neither changed)."""
    if isinstance(live, dict) and isinstance(config, dict):
        result = dict(live)
        for key, value in config.items():
            if value is None:
                result.pop(key, None)
            elif key in live:
                result[key] = merge(live[key], value, field_schema(schema, key))
            else:
                result[key] = copy.deepcopy(value)
        return result
    if isinstance(live, list) and isinstance(config, list):
        return _merge_list(live, config, schema)
    return copy.deepcopy(config)


def _merge_list(live: list[Any], config: list[Any], schema: Obj) -> list[Any]:
    kind, keys = list_type(schema)
    if kind == "set":
        return live + [copy.deepcopy(v) for v in config if v not in live]
    if kind != "map" or any(item_key(item, keys) is None for item in live + config):
        return copy.deepcopy(config)
    result = list(live)
    for item in config:
        element = item_key(item, keys)
        index = next((i for i, old in enumerate(result) if item_key(old, keys) == element), None)
        if index is None:
            result.append(copy.deepcopy(item))
        else:
            result[index] = merge(result[index], item, item_schema(schema))
    return result


def conflict_error(conflicts: list[tuple[Entry, Path]]) -> ApplyError:
    """The API server's 409 for an apply's conflicts (its message and causes)."""
    causes = [
        {
            "type": "FieldManagerConflict",
            "message": f"conflict with {entry.describe()}",
            "field": path_string(path),
        }
        for entry, path in conflicts
    ]
    if len(conflicts) == 1:
        [(entry, path)] = conflicts
        message = f"conflict with {entry.describe()}: {path_string(path)}"
        return ApplyError(
            409, "Conflict", f"Apply failed with 1 conflict: {message}", {"causes": causes}
        )
    by_manager: dict[str, list[str]] = {}
    for entry, path in conflicts:
        by_manager.setdefault(entry.describe(), []).append(f"- {path_string(path)}")
    lines = [
        line
        for name in sorted(by_manager)
        for line in (f"conflicts with {name}:", *by_manager[name])
    ]
    message = f"Apply failed with {len(conflicts)} conflicts: " + "\n".join(lines)
    return ApplyError(409, "Conflict", message, {"causes": causes})
