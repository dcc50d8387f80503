"""How a model splits over tensor-parallel ranks, and the step buffer rank 0 sends the others
(fast: no process group)."""

from __future__ import annotations

import pytest

from engine.config import EngineConfig
from engine.core.scheduler_output import ScheduledRequest
from engine.executor.step_codec import decode_step, encode_step
from engine.inputs.sampling_params import SamplingParams
from engine.model_config import ModelConfig
from engine.models.tp_layout import SKIP, Narrow, TPLayout, check_tp_layout
from pagedock.errors import ConfigError


def make_config(heads: int = 8, kv_heads: int = 2, vocab: int = 101) -> ModelConfig:
    return ModelConfig(
        vocab_size=vocab,
        hidden_size=heads * 4,
        intermediate_size=24,
        num_hidden_layers=1,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=4,
    )


@pytest.mark.parametrize(
    ("heads", "kv_heads", "tp"), [(4, 2, 2), (4, 1, 2), (8, 2, 4), (9, 3, 3), (4, 4, 4)]
)
def test_layouts_that_split_evenly_are_accepted(heads: int, kv_heads: int, tp: int) -> None:
    check_tp_layout(make_config(heads, kv_heads), tp)


@pytest.mark.parametrize(
    ("heads", "kv_heads", "tp", "problem"),
    [
        (9, 3, 2, r"num_attention_heads \(9\) is not divisible by it"),
        (6, 3, 2, r"num_key_value_heads \(3\) neither divides it nor is divisible by it"),
        (12, 2, 3, r"num_key_value_heads \(2\) neither"),
    ],
)
def test_layouts_that_do_not_split_are_a_config_error(
    heads: int, kv_heads: int, tp: int, problem: str
) -> None:
    with pytest.raises(ConfigError, match=f"tensor_parallel_size {tp} does not fit.*{problem}"):
        check_tp_layout(make_config(heads, kv_heads), tp)


def test_kv_heads_split_when_there_are_enough() -> None:
    layouts = [TPLayout(make_config(8, 4), rank, 2) for rank in range(2)]
    assert [(lay.num_heads, lay.num_kv_heads, lay.first_kv_head) for lay in layouts] == [
        (4, 2, 0),
        (4, 2, 2),
    ]
    assert layouts[1].narrow_for("model.layers.0.self_attn.k_proj.weight") == Narrow(0, 8, 16)


def test_kv_heads_are_replicated_when_fewer_than_ranks() -> None:
    # 8 query heads over 2 KV heads on 4 ranks: ranks 0-1 share KV head 0, ranks 2-3 KV head 1.
    layouts = [TPLayout(make_config(8, 2), rank, 4) for rank in range(4)]
    assert [lay.first_kv_head for lay in layouts] == [0, 0, 1, 1]
    assert {lay.num_kv_heads for lay in layouts} == {1}
    assert layouts[3].narrow_for("model.layers.0.self_attn.v_proj.weight") == Narrow(0, 4, 8)
    assert layouts[3].narrow_for("model.layers.0.self_attn.q_proj.weight") == Narrow(0, 24, 32)


def test_row_parallel_weights_split_columns_and_their_bias_lives_on_rank_0() -> None:
    first, second = (TPLayout(make_config(), rank, 2) for rank in range(2))
    assert second.narrow_for("model.layers.0.self_attn.o_proj.weight") == Narrow(1, 16, 32)
    assert second.narrow_for("model.layers.0.mlp.down_proj.weight") == Narrow(1, 12, 24)
    assert first.narrow_for("model.layers.0.mlp.down_proj.bias") is None
    assert second.narrow_for("model.layers.0.mlp.down_proj.bias") == SKIP


def test_the_vocabulary_is_padded_to_a_multiple_of_the_ranks() -> None:
    first, second = (TPLayout(make_config(vocab=101), rank, 2) for rank in range(2))
    assert first.vocab_per_rank == second.vocab_per_rank == 51
    assert first.narrow_for("model.embed_tokens.weight") == Narrow(0, 0, 51)
    assert second.narrow_for("lm_head.weight") == Narrow(0, 51, 101)  # one padding row


def test_norms_are_replicated_and_one_rank_takes_everything_whole() -> None:
    assert TPLayout(make_config(), 1, 2).narrow_for("model.norm.weight") is None
    assert TPLayout(make_config()).narrow_for("model.layers.0.self_attn.q_proj.weight") is None


def scheduled(
    tokens: list[int], computed: int, blocks: list[int], sample: bool
) -> ScheduledRequest:
    return ScheduledRequest("r", tokens, computed, blocks, sample, SamplingParams(), [], [])


def test_a_step_survives_the_trip_to_the_workers() -> None:
    batch = [scheduled([7], 40, [3, 9, 4], True), scheduled([1, 2, 3, 4, 5], 0, [8], False)]
    batch[1].prompt_logprobs_offset, batch[1].num_prompt_logprobs_rows = 1, 3
    decoded = decode_step(encode_step(batch))
    fields = [
        (
            s.new_token_ids,
            s.num_computed_tokens,
            s.block_ids,
            s.do_sample,
            s.prompt_logprobs_offset,
            s.num_prompt_logprobs_rows,
        )
        for s in decoded
    ]
    assert fields == [([7], 40, [3, 9, 4], True, 0, 0), ([1, 2, 3, 4, 5], 0, [8], False, 1, 3)]


def test_a_step_costs_four_bytes_per_token_and_block_plus_24_per_sequence() -> None:
    batch = [scheduled([7], 40, [3, 9, 4], True), scheduled([1, 2, 3, 4, 5], 0, [8], False)]
    assert len(encode_step(batch)) == 4 * (1 + 6 * 2 + 6 + 4)


def test_tensor_parallel_settings_are_checked() -> None:
    with pytest.raises(ConfigError, match="tensor_parallel_size must be at least 1"):
        EngineConfig(tensor_parallel_size=0)
    with pytest.raises(ConfigError, match=r"tensor_parallel_port must be in 1\.\.65535"):
        EngineConfig(tensor_parallel_size=2, tensor_parallel_port=70000)
    assert EngineConfig(tensor_parallel_size=4).tensor_parallel_size == 4
