"""Label selectors as the API server reads them: `a=b,c!=d,e,!f,g in (x,y),h notin (z)`."""

from __future__ import annotations

import re
from collections.abc import Mapping

_SET_TERM = re.compile(r"^\s*([\w./-]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")


def matches_selector(labels: Mapping[str, str], selector: str) -> bool:
    """Whether `labels` satisfy every term of `selector` (an empty selector selects all)."""
    return all(_matches_term(labels, term) for term in _split_terms(selector))


def matches_labels(labels: Mapping[str, str], match_labels: Mapping[str, str]) -> bool:
    """A `matchLabels` map or a Service's `selector`: every pair present."""
    return all(labels.get(key) == value for key, value in match_labels.items())


def _split_terms(selector: str) -> list[str]:
    # NOTE: commas inside `in (a,b)` do not split terms.
    terms, depth, current = [], 0, ""
    for char in selector:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            terms.append(current)
            current = ""
        else:
            current += char
    terms.append(current)
    return [term.strip() for term in terms if term.strip()]


def _matches_term(labels: Mapping[str, str], term: str) -> bool:
    if match := _SET_TERM.match(term):
        key, operator, values = match.groups()
        inside = labels.get(key) in {value.strip() for value in values.split(",")}
        return inside if operator == "in" else not inside
    if "!=" in term:
        key, value = (part.strip() for part in term.split("!=", 1))
        return labels.get(key) != value
    if "=" in term:
        key, value = (part.strip() for part in term.replace("==", "=").split("=", 1))
        return labels.get(key) == value
    if term.startswith("!"):
        return term[1:].strip() not in labels
    return term in labels
