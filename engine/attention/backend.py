"""The attention interface: what the model hands an attention backend for one step.

The step's tokens form one flat varlen batch, ordered decodes first:

    tokens:          | d0 | d1 | d2 | p0 p0 p0 p0 p0 | p1 p1 p1 |
    query_start_loc:  0    1    2    3              8          11
    seq_lens:         the context length of each sequence *including* this step's tokens

A sequence's token i sits at absolute position seq_len - query_len + i, and attends causally to
every earlier position of its sequence: its cached prefix (read through the block table) and the
step's own earlier tokens.

KV cache, per layer, for K and for V:  [num_blocks, block_size, num_kv_heads, head_dim]
    slot = block_id * block_size + offset   (slot_mapping holds the slot of every new token)
    block_tables[s, j] = physical block holding positions [j*block_size, (j+1)*block_size) of s
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from pagedock.limits import ATTENTION_BACKENDS


@dataclass
class AttentionMetadata:
    """A step's batch layout, shared by every layer of the forward pass."""

    num_tokens: int
    num_seqs: int
    # The first num_decodes sequences have exactly one query token each.
    num_decodes: int
    slot_mapping: torch.Tensor  # [num_tokens] int64
    query_start_loc: torch.Tensor  # [num_seqs + 1] int32
    seq_lens: torch.Tensor  # [num_seqs] int32
    block_tables: torch.Tensor  # [num_seqs, max_num_blocks] int32, padded with 0
    max_query_len: int
    max_seq_len: int
    # Host copies, so CPU code never synchronises on a device tensor to loop over sequences.
    query_start_loc_cpu: list[int]
    seq_lens_cpu: list[int]
    # What a backend derives from the above once per step and reuses in every layer.
    backend_cache: dict[str, Any] = field(default_factory=dict)

    @property
    def num_decode_tokens(self) -> int:
        return self.num_decodes


class AttentionBackend(Protocol):
    """Writes the step's K/V into the paged cache and computes attention for its queries."""

    name: str

    def forward(
        self,
        query: torch.Tensor,  # [num_tokens, num_heads, head_dim]
        key: torch.Tensor,  # [num_tokens, num_kv_heads, head_dim]
        value: torch.Tensor,  # [num_tokens, num_kv_heads, head_dim]
        k_cache: torch.Tensor,  # [num_blocks, block_size, num_kv_heads, head_dim]
        v_cache: torch.Tensor,
        meta: AttentionMetadata,
        scale: float,
        out_dtype: torch.dtype | None = None,
    ) -> torch.Tensor:  # [num_tokens, num_heads, head_dim]
        """The output in `out_dtype` (the next GEMM's input dtype; None: the query's), which a
        backend may write directly rather than cast afterwards."""
        ...


def get_attention_backend(device: torch.device, name: str | None = None) -> AttentionBackend:
    """The torch backend on CPU (decodes through the C++ paged kernel when it builds), Triton on
    CUDA; `name` forces one: "torch", "torch-sdpa" (pure torch, no C++), "triton"."""
    choice = name or ("triton" if device.type == "cuda" else "torch")
    if choice in ("torch", "torch-sdpa"):
        from engine.attention.torch_attention import TorchAttentionBackend

        return TorchAttentionBackend(use_cpu_kernels=choice == "torch")
    if choice == "triton":
        from engine.attention.triton_attention import TritonAttentionBackend

        return TritonAttentionBackend()
    raise ValueError(f"unknown attention backend {choice!r}; expected one of {ATTENTION_BACKENDS}")
