"""llama.cpp's llama-server as a peer: where it is, and the flags that give it the KV memory and
threads the other systems get (../shared/peers/setup_llamacpp.sh builds it and the GGUFs).

Its KV cache is `-c` tokens in all, split evenly over `-np` slots (`--no-kv-unified`), f16 (2
bytes a value, the same bytes per token as a bfloat16 cache): the tokens that fit in the equal
KV bytes are the model's KV bytes per token into those bytes.
"""

from __future__ import annotations

import os
from pathlib import Path

from engine.model_config import ModelConfig

DEFAULT_DIR = Path("/tmp/llamacpp")
# The GGUF at the others' precision: the BF16 conversion of the weights vLLM loads.
DEFAULT_GGUF = "SmolLM2-135M-Instruct-BF16.gguf"
KV_BYTES_PER_VALUE = 2  # f16, llama-server's default cache type
# A slot's context is a whole number of these (llama.cpp pads contexts to 256).
CONTEXT_PAD = 256


def llama_server_binary() -> str:
    return os.environ.get(
        "PAGEDOCK_LLAMA_SERVER", str(DEFAULT_DIR / "build" / "bin" / "llama-server")
    )


def llama_server_model() -> str:
    return os.environ.get("PAGEDOCK_LLAMA_MODEL", str(DEFAULT_DIR / "models" / DEFAULT_GGUF))


def llama_server_available() -> bool:
    return Path(llama_server_binary()).exists() and Path(llama_server_model()).exists()


def kv_bytes_per_token(config: ModelConfig) -> int:
    """K and V of one token over every layer, at llama-server's f16."""
    values = 2 * config.num_hidden_layers * config.num_key_value_heads * config.head_dim
    return values * KV_BYTES_PER_VALUE


def context_tokens(kv_cache_bytes: int, bytes_per_token: int, num_slots: int) -> int:
    """The most tokens, a whole padded slot each, that `kv_cache_bytes` hold."""
    per_slot = kv_cache_bytes // bytes_per_token // num_slots
    per_slot -= per_slot % CONTEXT_PAD
    if per_slot < CONTEXT_PAD:
        raise ValueError(
            f"{kv_cache_bytes} KV bytes give {num_slots} slots under {CONTEXT_PAD} tokens each"
        )
    return per_slot * num_slots


def llama_server_flags(
    kv_cache_bytes: int, bytes_per_token: int, num_slots: int, threads: int
) -> list[str]:
    """Continuous batching over `num_slots` slots that share `kv_cache_bytes` evenly, on
    `threads` threads for decode and prompt batches alike."""
    context = context_tokens(kv_cache_bytes, bytes_per_token, num_slots)
    return [
        *("-m", llama_server_model(), "-np", str(num_slots), "-c", str(context)),
        *("--no-kv-unified", "-cb", "-t", str(threads), "-tb", str(threads)),
        *("--cache-prompt", "--no-webui", "--metrics"),
    ]
