"""GET /v1/kv/events: the NDJSON lines an engine streams of its prefix cache, for the router."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer

from pagedock.protocol.openai import OpenAIModel


class KVEventWire(OpenAIModel):
    type: Literal["stored", "removed", "cleared"]
    block_hashes: list[str] = Field(default_factory=list)
    parent_block_hash: str | None = None
    lora_name: str | None = None
    """On a "stored" event whose blocks were computed with a LoRA adapter: the adapter (its
    hashes chain from the adapter's own root, pagedock/kv/block_hash.py). Absent otherwise."""

    @model_serializer(mode="wrap")
    def _without_absent_adapter(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # NOTE: left out rather than null, so base-model events read exactly as before adapters.
        values: dict[str, Any] = handler(self)
        if values.get("lora_name") is None:
            values.pop("lora_name", None)
        return values


class KVSnapshotMessage(OpenAIModel):
    """First line of the stream, and again after the consumer fell behind: every cached hash."""

    type: Literal["snapshot"] = "snapshot"
    instance_id: str
    seq: int
    block_size: int
    block_hashes: list[str]
    root_hash: str | None = None
    """h_0 of the engine's hash chains (hex): a router hashes prompts from it, so both agree."""


class KVBatchMessage(OpenAIModel):
    """One engine step's cache changes; `seq` follows the snapshot's without gaps."""

    type: Literal["batch"] = "batch"
    instance_id: str
    seq: int
    events: list[KVEventWire]


class KVHeartbeatMessage(OpenAIModel):
    """Sent when nothing else was for a while, so a consumer can tell a quiet engine from a dead
    connection."""

    type: Literal["heartbeat"] = "heartbeat"
    instance_id: str
    seq: int
