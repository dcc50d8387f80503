"""Desired vs live: does the live object already hold every field we own, and what patch fixes it.

The API server adds defaults (imagePullPolicy, terminationMessagePath, ...) and writes status, so
"equal" is "desired is a subset of live". Lists compare element by element with the same length.
A merge patch cannot remove a field by omission, so the last applied desired state rides along in
an annotation, and fields that vanished from the desired state are patched to null.
"""

import json
import re
from decimal import Decimal, InvalidOperation
from typing import Any

from llm_operator.names import LAST_APPLIED_ANNOTATION

Obj = dict[str, Any]
_SUFFIXES: dict[str, Decimal | int] = {
    "": 1,
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?\d+)?)([a-zA-Z]*)$")


def is_subset(desired: Any, live: Any) -> bool:
    if isinstance(desired, dict):
        if not isinstance(live, dict):
            return False
        return all(is_subset(value, live.get(key)) for key, value in desired.items())
    if isinstance(desired, list):
        if not isinstance(live, list) or len(desired) != len(live):
            return False
        return all(is_subset(d, v) for d, v in zip(desired, live, strict=True))
    if isinstance(desired, bool) or isinstance(live, bool):
        return desired is live
    return desired == live or _same_quantity(desired, live)


def _same_quantity(a: Any, b: Any) -> bool:
    """1 == "1", "1000m" == "1", "1024Mi" == "1Gi": the server canonicalises quantities."""
    if isinstance(a, bool) or isinstance(b, bool) or not isinstance(a, int | str):
        return False
    first, second = parse_quantity(a), parse_quantity(b)
    return first is not None and first == second


def parse_quantity(value: int | str | Any) -> Decimal | None:
    match = _QUANTITY.match(str(value))
    if match is None or match.group(2) not in _SUFFIXES:
        return None
    try:
        return Decimal(match.group(1)) * _SUFFIXES[match.group(2)]
    except InvalidOperation:
        return None


def with_last_applied(desired: Obj) -> Obj:
    """The desired object, annotated with itself (minus the annotation)."""
    annotations = dict(desired["metadata"].get("annotations", {}))
    annotations[LAST_APPLIED_ANNOTATION] = json.dumps(
        desired, sort_keys=True, separators=(",", ":")
    )
    return {**desired, "metadata": {**desired["metadata"], "annotations": annotations}}


def merge_patch(desired: Obj, live: Obj) -> Obj:
    """A JSON merge patch that turns live into desired, nulling fields we applied before."""
    text = live.get("metadata", {}).get("annotations", {}).get(LAST_APPLIED_ANNOTATION)
    previous = json.loads(text) if text else {}
    return _null_removed(previous, desired)


def _null_removed(previous: Obj, desired: Obj) -> Obj:
    patch = dict(desired)
    for key, old in previous.items():
        if key not in desired:
            patch[key] = None
        elif isinstance(old, dict) and isinstance(desired[key], dict):
            patch[key] = _null_removed(old, desired[key])
    return patch
