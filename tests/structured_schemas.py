"""Twenty JSON schemas for the structured-outputs tests: nested objects, arrays, enums, required
fields, bounded numbers. Every string and array is bounded so that a 135M model's output stays
short (a `length` finish is a failure in these tests), and each comes with a prompt that asks
for it."""

from __future__ import annotations

from typing import Any


def _obj(properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties) if required is None else required,
        "additionalProperties": False,
    }


NAME = {"type": "string", "minLength": 1, "maxLength": 12}
SHORT = {"type": "string", "maxLength": 8}
AGE = {"type": "integer", "minimum": 0, "maximum": 120}
SCORE = {"type": "number", "minimum": 0, "maximum": 10}
COLOR = {"enum": ["red", "green", "blue"]}

SCHEMAS: list[tuple[str, dict[str, Any]]] = [
    ("a person", _obj({"name": NAME, "age": AGE})),
    ("a yes/no answer", _obj({"answer": {"type": "boolean"}})),
    ("a color", _obj({"color": COLOR})),
    ("a rating", _obj({"score": SCORE, "label": SHORT})),
    (
        "a city",
        _obj(
            {
                "city": NAME,
                "country": NAME,
                "population": {"type": "integer", "minimum": 0, "maximum": 99999},
            }
        ),
    ),
    (
        "a list of colors",
        _obj({"colors": {"type": "array", "items": COLOR, "minItems": 1, "maxItems": 3}}),
    ),
    (
        "a point",
        _obj(
            {
                "x": {"type": "integer", "minimum": -100, "maximum": 100},
                "y": {"type": "integer", "minimum": -100, "maximum": 100},
            }
        ),
    ),
    (
        "a book",
        _obj(
            {
                "title": NAME,
                "author": _obj(
                    {"name": NAME, "born": {"type": "integer", "minimum": 1000, "maximum": 2025}}
                ),
            }
        ),
    ),
    (
        "a task",
        _obj({"task": NAME, "done": {"type": "boolean"}, "priority": {"enum": ["low", "high"]}}),
    ),
    ("a pet", _obj({"kind": {"enum": ["cat", "dog", "fish"]}, "name": NAME}, required=["kind"])),
    (
        "three numbers",
        {
            "type": "array",
            "items": {"type": "integer", "minimum": 0, "maximum": 9},
            "minItems": 3,
            "maxItems": 3,
        },
    ),
    (
        "a team",
        _obj(
            {
                "team": NAME,
                "members": {
                    "type": "array",
                    "items": _obj({"name": NAME, "age": AGE}),
                    "minItems": 1,
                    "maxItems": 2,
                },
            }
        ),
    ),
    (
        "a temperature",
        _obj(
            {"celsius": {"type": "number", "minimum": -50, "maximum": 50}, "unit": {"const": "C"}}
        ),
    ),
    (
        "an address",
        _obj(
            {
                "street": NAME,
                "number": {"type": "integer", "minimum": 1, "maximum": 999},
                "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
            }
        ),
    ),
    (
        "a product",
        _obj(
            {
                "sku": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{3}$"},
                "price": {"type": "integer", "minimum": 1, "maximum": 500},
                "in_stock": {"type": "boolean"},
            }
        ),
    ),
    ("a language", {"enum": ["English", "French", "German", "Spanish"]}),
    (
        "a grade",
        _obj(
            {
                "student": NAME,
                "grade": {"type": "integer", "minimum": 1, "maximum": 6},
                "passed": {"type": "boolean"},
            }
        ),
    ),
    (
        "a weekday",
        _obj(
            {
                "day": {"enum": ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]},
                "hour": {"type": "integer", "minimum": 0, "maximum": 23},
            }
        ),
    ),
    (
        "a nested config",
        _obj(
            {
                "server": _obj(
                    {"host": NAME, "port": {"type": "integer", "minimum": 1, "maximum": 65535}}
                ),
                "debug": {"type": "boolean"},
            }
        ),
    ),
    (
        "tags",
        _obj(
            {
                "tags": {"type": "array", "items": SHORT, "maxItems": 3},
                "count": {"type": "integer", "minimum": 0, "maximum": 3},
            }
        ),
    ),
]


def prompt_for(what: str) -> str:
    return f"Reply with {what} as JSON."
