"""Structured outputs through the offline API with the built-in SmolLM2: guided rows batched with
unguided ones, preemption of a guided request, grammar states released, reset_prefix_cache.

One engine with a small KV pool (12 blocks of 16 tokens), so that three guided chats at once
must preempt; the mixed-batch comparison uses two short requests, which fit together."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest

from engine import LLM
from engine.inputs.sampling_params import SamplingParams, StructuredOutputsParams
from tests.structured_schemas import SCHEMAS, prompt_for

pytestmark = pytest.mark.slow

NUM_KV_BLOCKS = 12


@pytest.fixture(scope="module")
def llm(smollm2_gguf_path: Path) -> LLM:
    # float32 throughout: rows are token-identical across batch shapes only without bf16 GEMMs
    # (oneDNN's bf16 kernels round differently for different batch sizes).
    return LLM(
        model=str(smollm2_gguf_path),
        dtype="float32",
        max_model_len=128,
        num_kv_blocks=NUM_KV_BLOCKS,
        block_size=16,
    )


def chat(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def guided(schema: dict, **kwargs: object) -> SamplingParams:
    return SamplingParams(
        max_tokens=80, structured_outputs=StructuredOutputsParams(json=schema), **kwargs
    )


def assert_valid(text: str, schema: dict) -> None:
    jsonschema.validate(json.loads(text), schema)


def test_unguided_rows_are_token_identical_next_to_guided_ones(llm: LLM) -> None:
    plain = SamplingParams(max_tokens=24, temperature=0)
    seeded = SamplingParams(max_tokens=24, temperature=0.9, seed=11)
    alone = llm.chat([chat("Name a fruit."), chat("Name a tree.")], [plain, seeded], False)
    _, schema = SCHEMAS[0]
    mixed = llm.chat(
        [chat("Name a fruit."), chat(prompt_for("a person")), chat("Name a tree.")],
        [plain, guided(schema, temperature=0.7, seed=2), seeded],
        use_tqdm=False,
    )
    assert mixed[0].outputs[0].token_ids == alone[0].outputs[0].token_ids
    assert mixed[2].outputs[0].token_ids == alone[1].outputs[0].token_ids
    assert_valid(mixed[1].outputs[0].text, schema)
    assert mixed[1].outputs[0].finish_reason == "stop"
    assert llm.engine.guided.num_live == 0


def test_a_preempted_guided_request_resumes_with_valid_output(llm: LLM) -> None:
    before = llm.stats().num_preemptions
    picks = [SCHEMAS[7], SCHEMAS[11], SCHEMAS[18]]  # nested: long enough to outgrow the pool
    outputs = llm.chat(
        [chat(prompt_for(what)) for what, _ in picks],
        [guided(schema, temperature=0) for _, schema in picks],
        use_tqdm=False,
    )
    assert llm.stats().num_preemptions > before
    for output, (_, schema) in zip(outputs, picks, strict=True):
        assert output.outputs[0].finish_reason == "stop"
        assert_valid(output.outputs[0].text, schema)
    assert llm.engine.guided.num_live == 0


def test_regex_choice_and_n_children_each_follow_the_constraint(llm: LLM) -> None:
    regex = SamplingParams(
        max_tokens=20,
        temperature=1.0,
        seed=5,
        n=2,
        structured_outputs=StructuredOutputsParams(regex=r"[A-Z][a-z]{2,6}-[0-9]{2}"),
    )
    choice = SamplingParams(
        max_tokens=10, structured_outputs=StructuredOutputsParams(choice=["alpha", "beta"])
    )
    out = llm.chat([chat("Make up a code."), chat("Pick one.")], [regex, choice], use_tqdm=False)
    assert all(re.fullmatch(r"[A-Z][a-z]{2,6}-[0-9]{2}", c.text) for c in out[0].outputs)
    assert out[1].outputs[0].text in ("alpha", "beta")
    assert llm.engine.guided.num_live == 0


def test_aborting_a_guided_request_frees_its_grammar_state_and_blocks(llm: LLM) -> None:
    engine = llm.engine
    engine.add_request("abort-me", "Reply with JSON.", guided({"type": "array"}, temperature=0))
    engine.step()
    assert engine.guided.num_live == 1
    engine.abort_request("abort-me")
    assert engine.guided.num_live == 0
    assert engine.stats().num_free_kv_blocks == NUM_KV_BLOCKS
    assert engine.stats().num_grammar_states == 0


def test_reset_prefix_cache_refuses_while_a_request_holds_blocks(llm: LLM) -> None:
    engine = llm.engine
    engine.add_request("holder", "Hello there, how are you?", SamplingParams(max_tokens=4))
    engine.step()
    assert not llm.reset_prefix_cache()
    while engine.has_unfinished_requests():
        engine.step()
    assert llm.reset_prefix_cache()
    assert engine.scheduler.cached_block_hashes() == []
