"""The llama family (Llama 2/3, Mistral-style, SmolLM2) over a paged KV cache.

One forward pass computes one step's flat varlen batch: tokens of every scheduled request side by
side, no padding. QKV and gate/up projections are fused into one GEMM each; logits are computed
only at the positions that sample.

The residual stream is in the activation dtype. A GEMM's product may come out in another (bf16
GEMMs under float32 activations on the CPU, engine/layers/cpu_linear.py): the norms and SiLU
take it as it is, and the QKV product and the tensor-parallel all-reduces are cast back.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import torch
from torch import nn

from engine.attention.backend import AttentionBackend, AttentionMetadata
from engine.layers.activation import silu_and_mul
from engine.layers.cpu_linear import gemm_input_dtype
from engine.layers.norm import RMSNorm
from engine.layers.rotary import RotaryEmbedding, apply_rotary
from engine.layers.vocab_parallel import VocabParallelEmbedding
from engine.model_config import ModelConfig
from engine.models.tp_layout import TPLayout
from pagedock.errors import ModelLoadError

if TYPE_CHECKING:
    from engine.distributed.tp_group import TPGroup

CosSin = tuple[torch.Tensor, torch.Tensor]
BetweenLayers = Callable[[int, int], None]
"""Called with (layer index, number of layers) after each layer (engine/core/step_interrupt.py)."""


class LlamaAttention(nn.Module):
    """This rank's heads (all of them without tensor parallelism): QKV column-parallel, o_proj
    row-parallel with one all-reduce."""

    def __init__(self, layout: TPLayout, backend: AttentionBackend, tp: TPGroup | None) -> None:
        super().__init__()
        config = layout.config
        self.num_heads = layout.num_heads
        self.num_kv_heads = layout.num_kv_heads
        self.head_dim = config.head_dim
        self.q_size = self.num_heads * self.head_dim
        self.kv_size = self.num_kv_heads * self.head_dim
        self.scale = self.head_dim**-0.5
        self.qkv_proj = nn.Linear(
            config.hidden_size, self.q_size + 2 * self.kv_size, bias=config.attention_bias
        )
        o_bias = config.attention_bias and layout.holds_row_parallel_bias
        self.o_proj = nn.Linear(self.q_size, config.hidden_size, bias=o_bias)
        self.backend = backend
        self.tp = tp

    def forward(
        self,
        cos_sin: CosSin,
        hidden: torch.Tensor,
        kv_cache: tuple[torch.Tensor, torch.Tensor],
        meta: AttentionMetadata,
        dtype: torch.dtype,
    ) -> torch.Tensor:
        """The attention sublayer's output; `dtype` is the activations' (rotary and the cache
        take q, k and v in it)."""
        num_tokens = hidden.shape[0]
        qkv = self.qkv_proj(hidden).to(dtype)
        q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q = q.view(num_tokens, self.num_heads, self.head_dim)
        k = k.view(num_tokens, self.num_kv_heads, self.head_dim)
        v = v.view(num_tokens, self.num_kv_heads, self.head_dim)
        q, k = apply_rotary(q, k, cos_sin)
        out = self.backend.forward(
            q, k, v, kv_cache[0], kv_cache[1], meta, self.scale, gemm_input_dtype(self.o_proj)
        )
        out = self.o_proj(out.reshape(num_tokens, self.q_size))
        return out if self.tp is None else self.tp.all_reduce(out.to(dtype))


class LlamaMLP(nn.Module):
    """gate/up column-parallel, down_proj row-parallel with one all-reduce."""

    def __init__(self, layout: TPLayout, tp: TPGroup | None) -> None:
        super().__init__()
        config = layout.config
        self.intermediate_size = layout.intermediate_size
        self.gate_up_proj = nn.Linear(
            config.hidden_size, 2 * self.intermediate_size, bias=config.mlp_bias
        )
        down_bias = config.mlp_bias and layout.holds_row_parallel_bias
        self.down_proj = nn.Linear(self.intermediate_size, config.hidden_size, bias=down_bias)
        self.tp = tp

    def forward(self, x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        out = self.down_proj(silu_and_mul(self.gate_up_proj(x)))
        return out if self.tp is None else self.tp.all_reduce(out.to(dtype))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, layout: TPLayout, backend: AttentionBackend, tp: TPGroup | None) -> None:
        super().__init__()
        config = layout.config
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = LlamaAttention(layout, backend, tp)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = LlamaMLP(layout, tp)

    def forward(
        self,
        cos_sin: CosSin,
        hidden: torch.Tensor,
        residual: torch.Tensor | None,
        kv_cache: tuple[torch.Tensor, torch.Tensor],
        meta: AttentionMetadata,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(hidden, residual) in, (hidden, residual) out: each residual add is fused into the
        norm that follows it. The first layer's residual is the embedding itself."""
        dtype = (hidden if residual is None else residual).dtype  # the activations'
        if residual is None:
            residual = hidden
            hidden = self.input_layernorm(hidden)
        else:
            hidden, residual = self.input_layernorm.add_and_norm(hidden, residual)
        hidden = self.self_attn(cos_sin, hidden, kv_cache, meta, dtype)
        hidden, residual = self.post_attention_layernorm.add_and_norm(hidden, residual)
        return self.mlp(hidden, dtype), residual


class LlamaForCausalLM(nn.Module):
    """The whole model, or with `tp` this rank's shard of it (engine/models/tp_layout.py)."""

    def __init__(
        self,
        config: ModelConfig,
        max_positions: int,
        backend: AttentionBackend,
        tp: TPGroup | None = None,
    ) -> None:
        super().__init__()
        self.config = config
        self.tp = tp
        self.layout = TPLayout(config) if tp is None else TPLayout(config, tp.rank, tp.world_size)
        layout = self.layout
        self.embed_tokens: nn.Embedding | VocabParallelEmbedding = (
            nn.Embedding(config.vocab_size, config.hidden_size)
            if tp is None
            else VocabParallelEmbedding(
                layout.vocab_start, layout.vocab_per_rank, config.hidden_size, tp
            )
        )
        # Shared by every layer (one table, not thirty).
        self.rotary = RotaryEmbedding(config, max_positions)
        self.layers = nn.ModuleList(
            LlamaDecoderLayer(layout, backend, tp) for _ in range(config.num_hidden_layers)
        )
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.lm_head = nn.Linear(config.hidden_size, layout.vocab_per_rank, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.embed_tokens.weight

    def forward(
        self,
        input_ids: torch.Tensor,  # [num_tokens]
        positions: torch.Tensor,  # [num_tokens]
        kv_caches: list[tuple[torch.Tensor, torch.Tensor]],
        meta: AttentionMetadata,
        sample_indices: torch.Tensor,  # [num_sampled]: rows of the batch whose logits are needed
        between_layers: BetweenLayers | None = None,
    ) -> torch.Tensor:  # [num_sampled, vocab_size], float32
        hidden, residual = self.decode_layers(input_ids, positions, kv_caches, meta, between_layers)
        return self.logits(hidden, residual, sample_indices)

    def decode_layers(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        kv_caches: list[tuple[torch.Tensor, torch.Tensor]],
        meta: AttentionMetadata,
        between_layers: BetweenLayers | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Every layer over the batch: (hidden, residual) of every row, before the final norm.
        `between_layers(index, num_layers)` after each layer (it may raise to stop the pass)."""
        hidden = self.embed_tokens(input_ids)
        cos_sin = self.rotary.lookup(positions, hidden.dtype)
        residual: torch.Tensor | None = None
        num_layers = len(self.layers)
        for index, (layer, kv_cache) in enumerate(zip(self.layers, kv_caches, strict=True)):
            hidden, residual = layer(cos_sin, hidden, residual, kv_cache, meta)
            if between_layers is not None:
                between_layers(index, num_layers)
        assert residual is not None
        return hidden, residual

    def final_hidden(
        self, hidden: torch.Tensor, residual: torch.Tensor, indices: torch.Tensor
    ) -> torch.Tensor:
        """[len(indices), hidden_size]: the rows' last hidden states after the final norm (what
        transformers' LlamaModel returns as last_hidden_state; embeddings pool these). Indexing
        copies the rows, so `hidden` and `residual` are left as they were."""
        normed, _ = self.norm.add_and_norm(hidden[indices], residual[indices])
        return normed

    def logits(
        self, hidden: torch.Tensor, residual: torch.Tensor, sample_indices: torch.Tensor
    ) -> torch.Tensor:
        """[len(sample_indices), vocab_size] float32: the last add and norm, and the LM head,
        only at the rows that sample."""
        logits = self.lm_head(self.final_hidden(hidden, residual, sample_indices)).float()
        if self.tp is not None:  # rank 0 gets the whole vocabulary, the others nothing
            logits = self.tp.gather_vocab(logits, self.config.vocab_size)
        return logits

    # ---- weights -------------------------------------------------------------------------

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Load HF-named tensors (q/k/v and gate/up land in their fused shards)."""
        params = dict(self.named_parameters())
        loaded: set[str] = set()
        for hf_name, tensor in weights:
            target = _map_hf_name(hf_name)
            if target is None:
                continue
            name, shard = target
            if name == "lm_head.weight" and self.config.tie_word_embeddings:
                continue
            param = params.get(name)
            if param is None:
                raise ModelLoadError(f"unexpected weight {hf_name!r} for this architecture")
            self._copy_shard(param, name, shard, tensor, hf_name)
            loaded.add(f"{name}:{shard}")
        missing = sorted(set(self._expected_shards()) - loaded)
        if missing:
            raise ModelLoadError(f"weights missing from the checkpoint: {missing[:8]}")

    def _copy_shard(
        self, param: nn.Parameter, name: str, shard: str | None, tensor: torch.Tensor, hf_name: str
    ) -> None:
        rows = self.shard_rows(shard)
        target = param.data if rows is None else param.data[rows[0] : rows[1]]
        if name in _VOCAB_PARALLEL and target.shape[0] > tensor.shape[0]:
            target[tensor.shape[0] :].zero_()  # the last rank's padding rows
            target = target[: tensor.shape[0]]
        if target.shape != tensor.shape:
            raise ModelLoadError(
                f"weight {hf_name!r} has shape {tuple(tensor.shape)}, "
                f"expected {tuple(target.shape)}"
            )
        target.copy_(tensor)

    def shard_rows(self, shard: str | None) -> tuple[int, int] | None:
        """The rows of a fused weight (the columns of its product) that hold `shard` ("q", "k",
        "v", "gate", "up"); None for an unfused weight."""
        if shard is None:
            return None
        layout, head_dim = self.layout, self.config.head_dim
        q, kv, inter = (
            layout.num_heads * head_dim,
            layout.num_kv_heads * head_dim,
            layout.intermediate_size,
        )
        offsets = {
            "q": (0, q),
            "k": (q, q + kv),
            "v": (q + kv, q + 2 * kv),
            "gate": (0, inter),
            "up": (inter, 2 * inter),
        }
        return offsets[shard]

    def _expected_shards(self) -> list[str]:
        expected = []
        for name, _ in self.named_parameters():
            if name == "lm_head.weight" and self.config.tie_word_embeddings:
                continue
            if ".qkv_proj." in name:
                expected += [f"{name}:{s}" for s in ("q", "k", "v")]
            elif ".gate_up_proj." in name:
                expected += [f"{name}:{s}" for s in ("gate", "up")]
            else:
                expected.append(f"{name}:None")
        return expected


_VOCAB_PARALLEL = ("embed_tokens.weight", "lm_head.weight")
_FUSED = {
    "q_proj": ("qkv_proj", "q"),
    "k_proj": ("qkv_proj", "k"),
    "v_proj": ("qkv_proj", "v"),
    "gate_proj": ("gate_up_proj", "gate"),
    "up_proj": ("gate_up_proj", "up"),
}
_SHARD_RE = re.compile(r"\.(q_proj|k_proj|v_proj|gate_proj|up_proj)\.")


def _map_hf_name(hf_name: str) -> tuple[str, str | None] | None:
    """HF parameter name -> (our parameter name, fused shard or None); None for ignorable
    tensors."""
    if "rotary_emb" in hf_name:
        return None
    name = hf_name.removeprefix("model.")
    match = _SHARD_RE.search(name)
    if match is None:
        return name, None
    fused, shard = _FUSED[match.group(1)]
    return name.replace(f".{match.group(1)}.", f".{fused}."), shard
