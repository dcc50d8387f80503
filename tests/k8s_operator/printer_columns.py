"""`kubectl get` of a custom resource as the API server answers it: kubectl asks for a
`meta.k8s.io/v1` Table (`Accept: application/json;as=Table;...`), and the server makes one of
the CRD's `additionalPrinterColumns` (a Name column first; `date` columns as ages, as kubectl
shows them; `priority: 1` columns only under `-o wide`, which kubectl decides).

The columns' JSONPaths are the simple ones CRDs use: `.a.b`, `[0]`, and a filter
`[?(@.field=="value")]`; a path that finds nothing is an empty cell."""

from __future__ import annotations

import datetime
import json
import re
from typing import Any

Obj = dict[str, Any]
NAME_COLUMN = {
    "name": "Name",
    "type": "string",
    "format": "name",
    "description": "Name must be unique within a namespace.",
    "priority": 0,
}
STEP = re.compile(r'\.([^.\[]+)|\[(\d+)\]|\[\?\(@\.([^=]+)=="([^"]*)"\)\]')


def wants_table(request: Any) -> bool:
    return "as=Table" in str(request.headers.get("Accept", ""))


def table(objects: list[Obj], columns: list[Obj], resource_version: str = "") -> Obj:
    definitions = [NAME_COLUMN] + [
        {
            "name": column["name"],
            "type": column["type"],
            "format": column.get("format", ""),
            "description": column.get("description", ""),
            "priority": column.get("priority", 0),
        }
        for column in columns
    ]
    rows = [
        {
            "cells": [obj["metadata"]["name"]] + [cell(obj, column) for column in columns],
            "object": {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": obj["metadata"],
            },
        }
        for obj in objects
    ]
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version},
        "columnDefinitions": definitions,
        "rows": rows,
    }


def cell(obj: Obj, column: Obj) -> Any:
    found = json_path(obj, column["jsonPath"])
    if found is None:
        return None
    if column["type"] == "date":
        return age(str(found))
    if isinstance(found, dict | list):
        return json.dumps(found)
    return found


def json_path(value: Any, path: str) -> Any:
    """The first value `path` finds in `value`, or None."""
    values = [value]
    for field, index, key, wanted in STEP.findall(path):
        found = []
        for current in values:
            if field and isinstance(current, dict) and field in current:
                found.append(current[field])
            elif index and isinstance(current, list) and int(index) < len(current):
                found.append(current[int(index)])
            elif key and isinstance(current, list):
                found += [i for i in current if isinstance(i, dict) and str(i.get(key)) == wanted]
        values = found
    return values[0] if values else None


def age(timestamp: str) -> str:
    """How kubectl writes an age: 45s, 12m, 3h, 2d."""
    then = datetime.datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    seconds = int((datetime.datetime.now(tz=datetime.UTC) - then).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= 2 * size:
            return f"{seconds // size}{unit}"
    return f"{max(seconds, 0)}s"
