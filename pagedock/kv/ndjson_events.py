"""GET /v1/kv/events: the NDJSON lines an engine streams of its prefix cache, for the router."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from pagedock.protocol.openai import OpenAIModel


class KVEventWire(OpenAIModel):
    type: Literal["stored", "removed", "cleared"]
    block_hashes: list[str] = Field(default_factory=list)
    parent_block_hash: str | None = None


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
