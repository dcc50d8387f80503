"""The weights load strategies: `mmap` leaves parameters uninitialised and takes the weights it
uses as stored in place, `copy` copies every one; both give the same model."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from torch import nn

from engine import LLM, SamplingParams
from engine.config import EngineConfig
from engine.loader.weights_load_strategy import (
    adopt_as_stored,
    set_weights_load_strategy,
    without_weight_init,
)
from pagedock.errors import ConfigError


@pytest.fixture
def restore_strategy() -> Iterator[None]:
    yield
    set_weights_load_strategy("mmap")  # the switch is process-wide


class Toy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(8, 4)
        self.qkv_proj = nn.Linear(4, 12, bias=False)


def test_weights_used_as_stored_become_the_parameters_and_others_are_copied() -> None:
    model = Toy()
    embed = torch.randn(8, 4)
    q = torch.randn(4, 4)  # a shard of the fused qkv_proj: no parameter has its name
    other_dtype = torch.randn(8, 4, dtype=torch.float64)

    list(adopt_as_stored(model, [("model.embed_tokens.weight", embed), ("q_proj.weight", q)]))

    assert model.embed_tokens.weight.data_ptr() == embed.data_ptr()
    list(adopt_as_stored(model, [("model.embed_tokens.weight", other_dtype)]))
    assert model.embed_tokens.weight.dtype == torch.float32  # not taken: another dtype
    assert model.embed_tokens.weight.data_ptr() == embed.data_ptr()


def test_initialisers_do_nothing_while_a_model_is_built_and_come_back_after() -> None:
    ones = torch.ones(3)
    with without_weight_init():
        nn.init.normal_(ones)
        assert torch.equal(ones, torch.ones(3))
    nn.init.zeros_(ones)
    assert torch.equal(ones, torch.zeros(3))


def test_an_unknown_strategy_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match="weights_load_strategy"):
        EngineConfig(weights_load_strategy="lazy")
    with pytest.raises(ValueError, match="mmap"):
        set_weights_load_strategy("lazy")


def test_both_strategies_generate_the_same_tokens(
    tiny_model_dir: Path, restore_strategy: None
) -> None:
    prompts = [[1, 5, 9, 13, 2], [7, 7, 3]]
    params = SamplingParams(max_tokens=8, temperature=0.0)
    tokens = {}
    for strategy in ("copy", "mmap"):
        set_weights_load_strategy(strategy)
        llm = LLM(model=str(tiny_model_dir), num_kv_blocks=16, max_model_len=128)
        outputs = llm.generate(prompts, params, use_tqdm=False)
        tokens[strategy] = [o.outputs[0].token_ids for o in outputs]
    assert tokens["mmap"] == tokens["copy"]
