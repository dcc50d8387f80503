"""StoredResponse: one stored response, as the store keeps it (plain JSON-able fields)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class StoredResponse:
    id: str
    """The response's id (`resp_…`)."""
    tenant: str
    """The tenant that created it: only its requests can read, delete or continue it."""
    response: dict[str, Any]
    """The Response object as answered (its `output` is the turn's output items)."""
    input_items: list[dict[str, Any]] = field(default_factory=list)
    """This request's own input items, with their ids (GET .../input_items)."""
    history: list[dict[str, Any]] = field(default_factory=list)
    """The items of the conversation before this request's input: the previous responses'
    inputs and outputs, oldest first, so a follow-up needs this one record only."""

    def conversation(self) -> list[dict[str, Any]]:
        """What a follow-up continues: the history, this input, then this output."""
        return [*self.history, *self.input_items, *self.response.get("output", [])]

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes) -> StoredResponse:
        return cls(**json.loads(text))
