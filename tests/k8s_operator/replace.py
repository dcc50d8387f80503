"""PUT (replace) as the API server does it: the body is the whole new object.

- Its name must be the URL's (400 otherwise); an object that does not exist is a 404 (no kind
  the emulator serves allows create on update).
- `metadata.resourceVersion` is a precondition: a stale one is the 409 `Conflict` a patch gets;
  a missing one is allowed for the built-in kinds (unconditional update) and refused for a
  custom resource with the API server's 422 (`metadata.resourceVersion: Invalid value: 0x0: must
  be specified for an update`).
- What the server owns stays: uid, creationTimestamp, generation (bumped on a spec change by the
  emulator), deletionTimestamp, and managedFields when the body has none.
- With a status subresource, a PUT to the resource keeps the stored status and a PUT to /status
  changes the status only.

Admission (defaults, pruning, CEL rules with `oldSelf`) and managedFields follow in the emulator,
as for every write."""

from __future__ import annotations

import copy
from typing import Any

import kmock

from tests.k8s_operator.field_errors import FieldError, Invalid
from tests.k8s_operator.field_paths import Obj

KEPT_META = ("uid", "creationTimestamp", "generation", "deletionTimestamp", "managedFields")


UNVERSIONED = FieldError(
    "metadata.resourceVersion",
    "FieldValueInvalid",
    "Invalid value: 0x0: must be specified for an update",
)


def replaced(old: Obj, body: Any, request: Any, status_apart: bool, custom: bool) -> Obj:
    """The object a PUT of `body` to `request`'s object (or its status) stores over `old`."""
    name, subresource = request.name, request.subresource
    if not isinstance(body, dict):
        raise kmock.KubernetesError(400, "BadRequest", "the body of a PUT must be an object", {})
    meta = body.get("metadata") or {}
    if meta.get("name", name) != name:
        message = (
            f"the name of the object ({meta.get('name')}) does not match the name on the URL "
            f"({name})"
        )
        raise kmock.KubernetesError(400, "BadRequest", message, {})
    _check_version(old, meta.get("resourceVersion"), request, custom)
    if subresource == "status":
        new = copy.deepcopy(old)
        new["status"] = copy.deepcopy(body.get("status"))
        if new["status"] is None:
            del new["status"]
        return new
    new = copy.deepcopy(body)
    new.setdefault("apiVersion", old.get("apiVersion"))
    new.setdefault("kind", old.get("kind"))
    new_meta = new.setdefault("metadata", {})
    new_meta.setdefault("name", name)
    for key in KEPT_META:
        if key in old.get("metadata", {}) and (key != "managedFields" or key not in new_meta):
            new_meta[key] = copy.deepcopy(old["metadata"][key])
    if status_apart:
        new.pop("status", None)
        if "status" in old:
            new["status"] = copy.deepcopy(old["status"])
    return new


def _check_version(old: Obj, wanted: str | None, request: Any, custom: bool) -> None:
    current = old.get("metadata", {}).get("resourceVersion")
    group, name = request.resource.group, request.name
    if wanted is None and custom:
        refusal = Invalid(old.get("kind", ""), group, name, [UNVERSIONED])
        raise kmock.KubernetesError(
            refusal.status, refusal.reason, refusal.message, refusal.details
        )
    if wanted is not None and wanted != current:
        qualified = request.resource.plural + (f".{group}" if group else "")
        message = (
            f'Operation cannot be fulfilled on {qualified} "{name}": the object has been '
            "modified; please apply your changes to the latest version and try again"
        )
        raise kmock.KubernetesError(409, "Conflict", message, {})
