"""How a llama model splits over tensor-parallel ranks (Megatron style), and which slice of each
checkpoint tensor a rank loads.

    q_proj, k_proj, v_proj, gate_proj, up_proj   column-parallel: each rank holds a block of rows
    o_proj, down_proj                            row-parallel: a block of columns, then all-reduce
    embed_tokens, lm_head                        vocab-parallel: a block of vocabulary rows

Query heads split evenly. KV heads split evenly when there are at least as many as ranks;
with fewer (tp % num_kv_heads == 0) each KV head is replicated on tp / num_kv_heads ranks, so
a rank's query heads always find their KV head locally:

    8 query heads, 2 KV heads, tp = 4 (replicated):
        rank 0: q 0-1, kv 0 | rank 1: q 2-3, kv 0 | rank 2: q 4-5, kv 1 | rank 3: q 6-7, kv 1

The vocabulary is padded up to a multiple of tp; padding rows are zero and their logits are cut
off after the gather. With tp == 1 every slice is the whole tensor and nothing is narrowed.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.model_config import ModelConfig
from pagedock.errors import ConfigError

# A checkpoint tensor this rank does not hold at all (a row-parallel bias lives on rank 0 only).
SKIP = "skip"


@dataclass(frozen=True)
class Narrow:
    """Take [start, end) along `dim` of a checkpoint tensor."""

    dim: int
    start: int
    end: int


def check_tp_layout(config: ModelConfig, tp_size: int) -> None:
    """ConfigError unless the model splits evenly over `tp_size` ranks."""
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    problems = []
    if heads % tp_size:
        problems.append(f"num_attention_heads ({heads}) is not divisible by it")
    if kv_heads % tp_size and tp_size % kv_heads:
        problems.append(
            f"num_key_value_heads ({kv_heads}) neither divides it nor is divisible by it"
        )
    if config.intermediate_size % tp_size:
        problems.append(f"intermediate_size ({config.intermediate_size}) is not divisible by it")
    if problems:
        raise ConfigError(
            f"tensor_parallel_size {tp_size} does not fit this model: " + "; ".join(problems)
        )


@dataclass(frozen=True)
class TPLayout:
    """One rank's share of the model."""

    config: ModelConfig
    rank: int = 0
    world_size: int = 1

    @property
    def num_heads(self) -> int:
        return self.config.num_attention_heads // self.world_size

    @property
    def num_kv_heads(self) -> int:
        return max(1, self.config.num_key_value_heads // self.world_size)

    @property
    def first_kv_head(self) -> int:
        kv_heads, tp = self.config.num_key_value_heads, self.world_size
        if kv_heads >= tp:
            return self.rank * self.num_kv_heads
        return self.rank // (tp // kv_heads)  # replicated: tp / kv_heads ranks share a KV head

    @property
    def intermediate_size(self) -> int:
        return self.config.intermediate_size // self.world_size

    @property
    def vocab_per_rank(self) -> int:
        return -(-self.config.vocab_size // self.world_size)

    @property
    def vocab_start(self) -> int:
        return self.rank * self.vocab_per_rank

    @property
    def vocab_end(self) -> int:
        """Exclusive; the last rank's share may be short of vocab_per_rank (padding)."""
        return min(self.config.vocab_size, self.vocab_start + self.vocab_per_rank)

    @property
    def holds_row_parallel_bias(self) -> bool:
        """The bias of o_proj/down_proj is added once, before the all-reduce, on rank 0."""
        return self.rank == 0

    def narrow_for(self, hf_name: str) -> Narrow | str | None:
        """This rank's slice of the checkpoint tensor `hf_name`: a Narrow, SKIP, or None for the
        whole tensor (replicated weights: norms; everything when world_size is 1)."""
        if self.world_size == 1:
            return None
        d = self.config.head_dim
        if ".q_proj." in hf_name:
            return Narrow(0, self.rank * self.num_heads * d, (self.rank + 1) * self.num_heads * d)
        if ".k_proj." in hf_name or ".v_proj." in hf_name:
            first = self.first_kv_head * d
            return Narrow(0, first, first + self.num_kv_heads * d)
        if ".gate_proj." in hf_name or ".up_proj." in hf_name:
            size = self.intermediate_size
            return Narrow(0, self.rank * size, (self.rank + 1) * size)
        if ".o_proj." in hf_name or ".down_proj." in hf_name:
            return self._row_parallel(hf_name)
        if "embed_tokens." in hf_name or hf_name.startswith("lm_head."):
            return Narrow(0, self.vocab_start, self.vocab_end)
        return None

    def _row_parallel(self, hf_name: str) -> Narrow | str | None:
        if hf_name.endswith(".bias"):
            return None if self.holds_row_parallel_bias else SKIP
        size = self.num_heads * self.config.head_dim
        if ".down_proj." in hf_name:
            size = self.intermediate_size
        return Narrow(1, self.rank * size, (self.rank + 1) * size)
