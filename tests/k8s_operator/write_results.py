"""What a write stores, as the API server sets it, and the body kmock applies to store it: the
metadata the server stamps on a create (uid, resourceVersion, generation, creationTimestamp, a
name from generateName) and on an update (a new resourceVersion, the generation bumped when
anything but metadata and status changed), the merge patch between two objects, and the API
server's messages for a missing object, a name that is not the URL's and a stale
resourceVersion."""

import datetime
import itertools
import uuid
from typing import Any

_versions = itertools.count(1000)


def next_version() -> str:
    return str(next(_versions))


def set_fields(request: Any, **fields: Any) -> None:
    """Change a parsed request (kmock's are frozen) in place: kmock's reactions match the very
    request it logged."""
    for name, value in fields.items():
        object.__setattr__(request, name, value)


def content_type(request: Any) -> str:
    return str(request.headers.get("Content-Type", "")).split(";")[0].strip()


def stamp_update(old: dict[str, Any], obj: dict[str, Any], bump: bool) -> None:
    """A new resourceVersion; the generation goes up when anything but metadata and status
    changed (not for a status write)."""
    meta = obj.setdefault("metadata", {})
    meta["resourceVersion"] = next_version()
    content = [{k: v for k, v in o.items() if k not in ("metadata", "status")} for o in (old, obj)]
    if bump and content[0] != content[1]:
        meta["generation"] = old.get("metadata", {}).get("generation", 1) + 1


def rewrite(body: Any, old: dict[str, Any] | None, admitted: dict[str, Any]) -> None:
    """Make a create's body the admitted object, a merge patch's the diff from `old` to it, and
    end a JSON patch with replacing the whole object by it.

    NOTE: in place, since kmock matches its reactions to the request it logged (its log shows
    what was stored, then). kmock stores under a lock another write may hold: a merge patch from
    the stored object keeps what that write changes meanwhile, as kmock's merge always did, and
    a JSON patch keeps its own operations (kopf's `test` of the resourceVersion first)."""
    if isinstance(body, dict):
        patch = admitted if old is None else merge_patch_between(old, admitted)
        body.clear()
        body.update(patch)
    else:
        body.append({"op": "replace", "path": "", "value": admitted})


def stamp_new(data: dict[str, Any]) -> None:
    meta = data.setdefault("metadata", {})
    if "name" not in meta and "generateName" in meta:
        meta["name"] = meta["generateName"] + uuid.uuid4().hex[:8]
    meta.setdefault("uid", str(uuid.uuid4()))
    meta.setdefault("resourceVersion", next_version())
    meta.setdefault("generation", 1)
    now = datetime.datetime.now(tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    meta.setdefault("creationTimestamp", now)


def parse_selector(selector: str) -> dict[str, str]:
    """`a=b,c=d` (equality terms only, which is all the operator sends)."""
    return dict(term.split("=", 1) for term in selector.split(",") if "=" in term)


def merge_patch_between(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """The JSON merge patch (RFC 7386) that makes `new` of `old`: a key `new` lacks is null, a
    map recurses, anything else that differs is `new`'s value."""
    patch: dict[str, Any] = {key: None for key in old if key not in new}
    for key, value in new.items():
        before = old.get(key)
        if isinstance(value, dict) and isinstance(before, dict):
            inner = merge_patch_between(before, value)
            if inner:
                patch[key] = inner
        elif key not in old or before != value:
            patch[key] = value
    return patch


def not_found(request: Any) -> str:
    group = request.resource.group
    qualified = request.resource.plural + (f".{group}" if group else "")
    return f'{qualified} "{request.name}" not found'


def name_mismatch(name: str, url_name: str) -> str:
    return f"the name of the object ({name}) does not match the name on the URL ({url_name})"


def conflict(request: Any) -> str:
    group = request.resource.group
    qualified = request.resource.plural + (f".{group}" if group else "")
    return (
        f'Operation cannot be fulfilled on {qualified} "{request.name}": the object has been '
        "modified; please apply your changes to the latest version and try again"
    )
