"""POST /v1/load_lora_adapter and /v1/unload_lora_adapter: vLLM's bodies for loading and unloading
LoRA adapters while the server runs (served only with --allow-runtime-lora-updating)."""

from __future__ import annotations

from pydantic import Field

from pagedock.protocol.openai import OpenAIModel


class LoadLoRAAdapterRequest(OpenAIModel):
    lora_name: str = Field(min_length=1)
    """The name requests will give as their `model`."""
    lora_path: str = Field(min_length=1)
    """The adapter's local directory (PEFT's adapter_config.json and adapter_model.safetensors),
    on the server's machine."""


class UnloadLoRAAdapterRequest(OpenAIModel):
    lora_name: str = Field(min_length=1)
    lora_int_id: int | None = None
    """vLLM's optional id of the adapter; pagedock unloads by name and ignores it."""
