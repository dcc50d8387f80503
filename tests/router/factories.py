"""Factories for the router's unit tests."""

from __future__ import annotations

from typing import Any

from router.config import RouterConfig
from router.policies import Candidate


def make_config(**overrides: Any) -> RouterConfig:
    fields: dict[str, Any] = {"replicas": ["http://127.0.0.1:1"], "model": None}
    fields.update(overrides)
    return RouterConfig(**fields)


def make_candidate(url: str, **fields: Any) -> Candidate:
    return Candidate(url=url, **fields)


def h(i: int) -> bytes:
    """A stand-in block hash."""
    return i.to_bytes(32, "big")
