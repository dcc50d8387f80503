"""Prompt logprobs (vLLM's `prompt_logprobs`) against transformers float32 on the same weights:
whole, in prefill chunks over several steps, beside a warm prefix cache, through preemption, in
batches with requests that do not ask, with n > 1 and with a LoRA adapter.

Tolerance: the engine runs float32 too, so each logprob is within 1e-4 of transformers'
log_softmax (seen: ~5e-6, the two implementations' rounding), and each rank is transformers' up
to the tokens within that tolerance (a near tie among unlikely tokens may fall either way)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from engine import LLM, SamplingParams
from engine.inputs.sampling_params import RequestOutputKind
from engine.runtime.logprobs import PromptLogprobs
from pagedock.errors import InvalidRequestError
from tests.engine.conftest import hf_greedy, make_prompts
from tests.engine.lora_factories import make_peft_adapter, peft_reference

ATOL = 1e-4
NUM_TOP = 3
ASKING = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True, prompt_logprobs=NUM_TOP)
PLAIN = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True)


def make_llm(model_dir: Path, **overrides: Any) -> LLM:
    args: dict[str, Any] = dict(dtype="float32", num_kv_blocks=256, max_model_len=256)
    args.update(overrides)
    return LLM(model=str(model_dir), **args)


def reference_logprobs(model: Any, prompt: list[int]) -> torch.Tensor:
    """[len(prompt), vocab]: transformers' float32 log_softmax at every position."""
    with torch.inference_mode():
        return model(torch.tensor([prompt])).logits[0].float().log_softmax(dim=-1)


def assert_matches(
    got: PromptLogprobs | None, prompt: list[int], reference: torch.Tensor, num_top: int
) -> None:
    assert got is not None and len(got) == len(prompt)
    assert got[0] is None
    for position, (token_id, entry) in enumerate(zip(prompt[1:], got[1:], strict=True)):
        expected = reference[position]
        assert entry is not None and next(iter(entry)) == token_id  # the prompt token first
        assert abs(entry[token_id].logprob - float(expected[token_id])) < ATOL
        assert_rank(entry[token_id].rank, expected, float(expected[token_id]))
        top = expected.topk(num_top)
        for rank, (top_id, value) in enumerate(
            zip(top.indices.tolist(), top.values, strict=True), 1
        ):
            assert abs(entry[top_id].logprob - float(value)) < ATOL
            assert entry[top_id].rank == rank
        assert len(entry) == num_top + (token_id not in top.indices.tolist())


def assert_rank(rank: int | None, expected: torch.Tensor, value: float) -> None:
    """The rank of a logprob of `value` among `expected`, up to tokens within ATOL of it (a
    near tie may fall either way between two implementations)."""
    assert rank is not None
    assert int((expected >= value + ATOL).sum()) < rank <= int((expected >= value - ATOL).sum())


@pytest.fixture(scope="module")
def prompts() -> list[list[int]]:
    # Across block boundaries, one a multiple of the block size, one of a single token.
    return [*make_prompts(4, 20, 90, seed=5), make_prompts(1, 48, 48, seed=6)[0], [17]]


@pytest.fixture(scope="module")
def references(hf_tiny_model: Any, prompts: list[list[int]]) -> list[torch.Tensor]:
    return [reference_logprobs(hf_tiny_model, p) for p in prompts]


def check_all(outputs: list[Any], prompts: list[list[int]], refs: list[torch.Tensor]) -> None:
    for output, prompt, reference in zip(outputs, prompts, refs, strict=True):
        assert_matches(output.prompt_logprobs, prompt, reference, NUM_TOP)


def test_prompt_logprobs_match_transformers_float32(
    tiny_model_dir: Path, prompts: list[list[int]], references: list[torch.Tensor]
) -> None:
    outputs = make_llm(tiny_model_dir).generate(prompts, ASKING, use_tqdm=False)
    check_all(outputs, prompts, references)


def test_prompt_logprobs_of_prefill_chunks_over_several_steps_match(
    tiny_model_dir: Path,
    prompts: list[list[int]],
    references: list[torch.Tensor],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    llm = make_llm(tiny_model_dir, max_num_batched_tokens=8)
    chunks = record_prompt_chunks(llm, monkeypatch)
    outputs = llm.generate(prompts, ASKING, use_tqdm=False)
    check_all(outputs, prompts, references)
    assert max(chunks) <= 8 and len(chunks) >= sum(len(p) - 1 for p in prompts) // 8


def record_prompt_chunks(llm: LLM, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The number of prompt-logprob rows of each request in each step, from now on."""
    runner = llm.engine.runner
    forward = runner.forward
    rows: list[int] = []

    def recording(batch: Any) -> Any:
        rows.extend(s.num_prompt_logprobs_rows for s in batch if s.num_prompt_logprobs_rows)
        return forward(batch)

    monkeypatch.setattr(runner, "forward", recording)
    return rows


def test_a_prefix_cache_warm_prompt_gets_every_position(
    tiny_model_dir: Path, prompts: list[list[int]], references: list[torch.Tensor]
) -> None:
    llm = make_llm(tiny_model_dir)
    llm.generate(prompts, PLAIN, use_tqdm=False)  # every prompt's blocks cached
    [asking, plain] = llm.generate([prompts[0]] * 2, [ASKING, PLAIN], use_tqdm=False)
    assert_matches(asking.prompt_logprobs, prompts[0], references[0], NUM_TOP)
    assert asking.num_cached_tokens == 0  # it computed every position, as vLLM's does
    assert plain.num_cached_tokens > 0 and plain.prompt_logprobs is None


def test_prompt_logprobs_through_preemption_match(tiny_model_dir: Path, hf_tiny_model: Any) -> None:
    # 8 sequences of up to ~120 tokens need ~50 blocks; 16 force preemption by recompute.
    llm = make_llm(tiny_model_dir, num_kv_blocks=16, max_num_batched_tokens=32)
    prompts = make_prompts(8, 30, 90, seed=43)
    params = SamplingParams(max_tokens=30, temperature=0.0, ignore_eos=True, prompt_logprobs=1)
    outputs = llm.generate(prompts, params, use_tqdm=False)
    assert llm.stats().num_preemptions > 0
    for output, prompt in zip(outputs, prompts, strict=True):
        assert_matches(output.prompt_logprobs, prompt, reference_logprobs(hf_tiny_model, prompt), 1)
        assert output.token_ids == hf_greedy(hf_tiny_model, prompt, 30)


def test_requests_that_do_not_ask_get_none_and_their_own_tokens(
    tiny_model_dir: Path, hf_tiny_model: Any, prompts: list[list[int]], references: list[Any]
) -> None:
    params = [ASKING if i % 2 == 0 else PLAIN for i in range(len(prompts))]
    outputs = make_llm(tiny_model_dir).generate(prompts, params, use_tqdm=False)
    for i, (output, prompt) in enumerate(zip(outputs, prompts, strict=True)):
        if i % 2 == 0:
            assert_matches(output.prompt_logprobs, prompt, references[i], NUM_TOP)
        else:
            assert output.prompt_logprobs is None
        assert output.token_ids == hf_greedy(hf_tiny_model, prompt, 4)


@pytest.mark.parametrize("enable_prefix_caching", [True, False])
def test_n_completions_report_the_prompt_logprobs_once(
    tiny_model_dir: Path,
    prompts: list[list[int]],
    references: list[torch.Tensor],
    enable_prefix_caching: bool,
) -> None:
    llm = make_llm(tiny_model_dir, enable_prefix_caching=enable_prefix_caching)
    params = SamplingParams(max_tokens=4, n=3, seed=1, prompt_logprobs=NUM_TOP)
    [output] = llm.generate([prompts[1]], params, use_tqdm=False)
    assert len(output.outputs) == 3
    assert_matches(output.prompt_logprobs, prompts[1], references[1], NUM_TOP)


def test_zero_asks_for_the_prompt_token_alone(
    tiny_model_dir: Path, prompts: list[list[int]], references: list[torch.Tensor]
) -> None:
    params = SamplingParams(max_tokens=1, prompt_logprobs=0)
    [output] = make_llm(tiny_model_dir).generate([prompts[0]], params, use_tqdm=False)
    assert output.prompt_logprobs is not None
    assert all(len(entry) == 1 for entry in output.prompt_logprobs[1:] if entry is not None)
    assert_matches(output.prompt_logprobs, prompts[0], references[0], 0)


def test_prompt_logprobs_come_decoded(tiny_model_dir: Path) -> None:
    llm = make_llm(tiny_model_dir)
    prompt = llm.engine.tokenizer.encode("The quick brown fox")
    [output] = llm.generate([prompt], SamplingParams(max_tokens=1, prompt_logprobs=2), False)
    assert output.prompt_logprobs is not None
    texts = [
        entry[t].decoded_token
        for t, entry in zip(prompt[1:], output.prompt_logprobs[1:], strict=True)
    ]
    assert "".join(texts) == llm.engine.tokenizer.decode(prompt[1:])


def test_a_delta_request_gets_its_prompt_logprobs_in_its_first_output_only(
    tiny_model_dir: Path, prompts: list[list[int]], references: list[torch.Tensor]
) -> None:
    engine = make_llm(tiny_model_dir, max_num_batched_tokens=16).engine
    params = SamplingParams(
        max_tokens=3, prompt_logprobs=NUM_TOP, output_kind=RequestOutputKind.DELTA
    )
    engine.add_request("delta", prompts[0], params)
    outputs = []
    while engine.has_unfinished_requests():
        outputs += engine.step()
    assert [o.prompt_logprobs is not None for o in outputs] == [True, False, False]
    assert_matches(outputs[0].prompt_logprobs, prompts[0], references[0], NUM_TOP)


def test_prompt_logprobs_with_a_lora_adapter_match_peft(
    tiny_model_dir: Path, tmp_path: Path, prompts: list[list[int]]
) -> None:
    from engine.inputs.engine_request import AdapterRef

    adapter = make_peft_adapter(
        tiny_model_dir, tmp_path / "sql", r=4, lora_alpha=16, target_modules=("q_proj", "v_proj")
    )
    llm = make_llm(tiny_model_dir, enable_lora=True, lora_modules=[f"sql={adapter}"])
    reference = reference_logprobs(peft_reference(tiny_model_dir, adapter), prompts[0])
    [output] = llm.generate([prompts[0]], ASKING, False, lora_request=AdapterRef("sql"))
    assert_matches(output.prompt_logprobs, prompts[0], reference, NUM_TOP)


@pytest.mark.parametrize("value", [-1, 21])
def test_prompt_logprobs_out_of_range_are_refused(value: int) -> None:
    with pytest.raises(InvalidRequestError, match=r"prompt_logprobs must be in \[0, 20\]"):
        SamplingParams(prompt_logprobs=value)
