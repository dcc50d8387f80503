"""`metadata.managedFields` as the API server keeps it: one entry per manager, operation (`Apply`
or `Update`) and subresource, each with the set of fields it owns (field_paths.py) in fieldsV1.

A write that is not an apply (a create, a replace, a merge, strategic or JSON patch) is an
`Update`: its manager (the `fieldManager` parameter, else the user agent up to its first `/`:
`kubectl`, `kopf`, `Python`) comes to own every field it added or changed, and every other
manager loses them, without a conflict. A field that is gone is owned by nobody. A write that
sets managedFields itself (kubectl's migration from client-side to server-side apply) is taken
at its word, as the API server does, before its own changes are tracked.

Never owned: apiVersion, kind and the metadata the server sets (name, namespace, uid,
resourceVersion, generation, timestamps, managedFields itself). For a resource with a status
subresource, a write to the resource owns nothing under status, and one to /status nothing but
status."""

from __future__ import annotations

import copy
import dataclasses
import datetime
from typing import Any

from tests.k8s_operator.field_paths import (
    Obj,
    Path,
    changed,
    from_fields_v1,
    members,
    to_fields_v1,
)

SERVER_SET = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
)
IGNORED: tuple[Path, ...] = (
    ("f:apiVersion",),
    ("f:kind",),
    *((("f:metadata", f"f:{name}")) for name in SERVER_SET),
)


@dataclasses.dataclass
class Entry:
    """One element of managedFields."""

    manager: str
    operation: str
    api_version: str
    subresource: str
    paths: set[Path]
    time: str

    @property
    def identity(self) -> tuple[str, str, str]:
        return self.manager, self.operation, self.subresource

    def describe(self) -> str:
        """The manager as a conflict names it (the API server's `printManager`)."""
        text = f'"{self.manager}"'
        if self.subresource:
            text += f' with subresource "{self.subresource}"'
        if self.operation == "Update":
            text += f" using {self.api_version}" + (f" at {self.time}" if self.time else "")
        return text


@dataclasses.dataclass(frozen=True)
class Scope:
    """Which fields a write may own: `subresource` is "" or "status"; `status_apart`: the
    resource has a status subresource."""

    subresource: str
    status_apart: bool

    def owned(self, paths: set[Path]) -> set[Path]:
        kept = {p for p in paths if not any(p[: len(i)] == i for i in IGNORED)}
        if self.subresource == "status":
            return {p for p in kept if p[:1] == ("f:status",)}
        if self.status_apart:
            return {p for p in kept if p[:1] != ("f:status",)}
        return kept


def now() -> str:
    return datetime.datetime.now(tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def manager_from(params: Any, headers: Any) -> str:
    """The `fieldManager` parameter, else the user agent's product (the API server's default)."""
    manager = params.get("fieldManager")
    if manager:
        return str(manager)
    return str(headers.get("User-Agent", "")).split("/", 1)[0][:128] or "unknown"


def read(obj: Obj | None) -> list[Entry]:
    entries = []
    for raw in ((obj or {}).get("metadata") or {}).get("managedFields") or []:
        entries.append(
            Entry(
                manager=raw.get("manager", ""),
                operation=raw.get("operation", "Update"),
                api_version=raw.get("apiVersion", ""),
                subresource=raw.get("subresource", ""),
                paths=from_fields_v1(raw.get("fieldsV1") or {}),
                time=raw.get("time", ""),
            )
        )
    return entries


def write(obj: Obj, entries: list[Entry]) -> None:
    """Store the entries that still own something in `obj`'s metadata (in place)."""
    stored = []
    for entry in entries:
        if not entry.paths:
            continue
        raw: Obj = {"manager": entry.manager, "operation": entry.operation}
        raw |= {"apiVersion": entry.api_version, "time": entry.time, "fieldsType": "FieldsV1"}
        raw["fieldsV1"] = to_fields_v1(entry.paths)
        if entry.subresource:
            raw["subresource"] = entry.subresource
        stored.append(raw)
    meta = obj.setdefault("metadata", {})
    if stored:
        meta["managedFields"] = stored
    else:
        meta.pop("managedFields", None)


def without_managed_fields(obj: Obj) -> Obj:
    copied = copy.deepcopy(obj)
    (copied.get("metadata") or {}).pop("managedFields", None)
    return copied


def record_update(old: Obj | None, new: Obj, manager: str, scope: Scope, schema: Obj) -> None:
    """Track a write that is not an apply in `new`'s managedFields (in place)."""
    given = (new.get("metadata") or {}).get("managedFields")
    taken = old is None or given != (old.get("metadata") or {}).get("managedFields")
    entries = read(new) if given and taken else read(old)
    before = without_managed_fields(old or {})
    after = without_managed_fields(new)
    touched = scope.owned(changed(before, after, schema))
    identity = (manager, "Update", scope.subresource)
    mine = next((e for e in entries if e.identity == identity), None)
    if mine is None and touched:
        mine = Entry(manager, "Update", new.get("apiVersion", ""), scope.subresource, set(), "")
        entries.append(mine)
    for entry in entries:
        if entry is not mine:
            entry.paths -= touched
    if mine is not None and touched:
        mine.paths |= touched
        mine.time = now()
    keep_present(entries, after, schema)
    write(new, entries)


def keep_present(entries: list[Entry], obj: Obj, schema: Obj) -> None:
    """A field that is gone from the object is owned by nobody."""
    present = set(members(obj, schema))
    for entry in entries:
        entry.paths &= present
