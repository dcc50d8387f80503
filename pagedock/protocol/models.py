"""GET /v1/models and /version."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from pagedock.protocol.openai import OpenAIModel, now_s


class ModelCard(OpenAIModel):
    id: str
    object: Literal["model"] = "model"
    created: int = Field(default_factory=now_s)
    owned_by: str = "pagedock"
    root: str | None = None
    """The model's path; a LoRA adapter's: the path it was loaded from."""
    parent: str | None = None
    """A LoRA adapter's base model (its id); None for the base model itself (vLLM's)."""
    max_model_len: int | None = None
    kv_root_hash: str | None = None
    """pagedock's: a LoRA adapter's block-hash chain root (hex), which changes when the name is
    loaded again with other weights; a router hashes the adapter's prompts from it."""


class ModelList(OpenAIModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class VersionResponse(OpenAIModel):
    version: str
    cpu_kernels: str | None = None
    """Which CPU kernels the engine runs: `prebuilt x86-64-v4` (or `-v3`, baseline `x86-64`),
    `jit -march=native`, `torch` (none), or `not loaded` (not asked for, as on GPUs)."""
