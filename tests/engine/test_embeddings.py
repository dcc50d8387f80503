"""Embeddings (LLM.embed): the model's final hidden states pooled, against transformers' own
LlamaModel (`last_hidden_state`, after the final norm) on the same weights, and the same vector
whatever the batch, the chunking, a preemption or the prefix cache.

Tolerances, float32 throughout: against transformers (an independent implementation) 1e-5
absolute + 1e-4 relative per value; the same prompt alone, in a batch, in chunks, beside
generation or recomputed after a preemption 1e-5 absolute (MEAN adds its rows chunk by chunk, so
a different chunking rounds differently; LAST and CLS read one row).
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from engine import LLM, SamplingParams
from engine.inputs.pooling_params import PoolingParams
from pagedock.errors import InvalidRequestError, PromptTooLongError
from tests.engine.conftest import make_prompts
from tests.tiny_model import make_tiny_llama_dir

HF_TOLERANCE: dict[str, Any] = dict(atol=1e-5, rtol=1e-4)
SAME_TOLERANCE: dict[str, Any] = dict(atol=1e-5, rtol=0.0)
_ids = itertools.count()
RAW = {kind: PoolingParams(pooling_type=kind, normalize=False) for kind in ("LAST", "MEAN", "CLS")}


@pytest.fixture(scope="module")
def llm(tiny_model_dir: Path) -> LLM:
    return make_llm(tiny_model_dir)


@pytest.fixture(scope="module")
def prompts() -> list[list[int]]:
    return make_prompts(6, 5, 90, seed=11)


def make_llm(model_dir: Path, **overrides: Any) -> LLM:
    args: dict[str, Any] = dict(dtype="float32", num_kv_blocks=256, max_model_len=256)
    args.update(overrides)
    return LLM(model=str(model_dir), **args)


def hf_hidden(hf_model: Any, prompt: list[int]) -> torch.Tensor:
    """transformers' last_hidden_state (after the final norm) of one prompt, alone."""
    with torch.inference_mode():
        return hf_model.model(torch.tensor([prompt])).last_hidden_state[0]


def reference(hidden: torch.Tensor, kind: str, normalize: bool = False) -> torch.Tensor:
    pooled = {"LAST": hidden[-1], "MEAN": hidden.mean(dim=0), "CLS": hidden[0]}[kind]
    return F.normalize(pooled, dim=0) if normalize else pooled


def vectors(llm: LLM, prompts: list[list[int]], params: Any = None, **kw: Any) -> list[Any]:
    return [torch.tensor(o.outputs.embedding) for o in llm.embed(prompts, params, **kw)]


@pytest.mark.parametrize("kind", ["LAST", "MEAN", "CLS"])
def test_each_pooling_matches_transformers(
    llm: LLM, hf_tiny_model: Any, prompts: list[list[int]], kind: str
) -> None:
    for prompt, got in zip(prompts, vectors(llm, prompts, RAW[kind], use_tqdm=False), strict=True):
        torch.testing.assert_close(got, reference(hf_hidden(hf_tiny_model, prompt), kind))


def test_normalized_mean_matches_transformers(
    llm: LLM, hf_tiny_model: Any, prompts: list[list[int]]
) -> None:
    params = PoolingParams(pooling_type="mean", normalize=True)
    for prompt, got in zip(prompts, vectors(llm, prompts, params, use_tqdm=False), strict=True):
        want = reference(hf_hidden(hf_tiny_model, prompt), "MEAN", normalize=True)
        torch.testing.assert_close(got, want, **HF_TOLERANCE)
        assert abs(float(got.norm()) - 1.0) < 1e-5


def test_the_default_is_the_last_position_normalized(
    llm: LLM, hf_tiny_model: Any, prompts: list[list[int]]
) -> None:
    [got] = vectors(llm, prompts[:1], use_tqdm=False)
    want = reference(hf_hidden(hf_tiny_model, prompts[0]), "LAST", normalize=True)
    torch.testing.assert_close(got, want, **HF_TOLERANCE)


def test_a_text_prompt_is_tokenized_as_generate_does(llm: LLM, hf_tiny_model: Any) -> None:
    assert llm.engine.tokenizer is not None
    ids = llm.engine.tokenizer.encode("The quick brown fox")
    [output] = llm.embed("The quick brown fox", RAW["MEAN"], use_tqdm=False)
    assert output.prompt_token_ids == ids
    want = reference(hf_hidden(hf_tiny_model, ids), "MEAN")
    torch.testing.assert_close(torch.tensor(output.outputs.embedding), want, **HF_TOLERANCE)


@pytest.mark.parametrize("kind", ["LAST", "MEAN", "CLS"])
def test_the_same_vector_alone_in_a_batch_and_in_chunks(
    tiny_model_dir: Path, prompts: list[list[int]], kind: str
) -> None:
    alone = [vectors(make_llm(tiny_model_dir), [p], RAW[kind], use_tqdm=False)[0] for p in prompts]
    batched = vectors(make_llm(tiny_model_dir), prompts, RAW[kind], use_tqdm=False)
    # Chunks of at most 16 tokens, each step shared by several prompts.
    chunked_llm = make_llm(tiny_model_dir, max_num_batched_tokens=16, max_num_seqs=4)
    chunked = vectors(chunked_llm, prompts, RAW[kind], use_tqdm=False)
    for a, b, c in zip(alone, batched, chunked, strict=True):
        torch.testing.assert_close(b, a, **SAME_TOLERANCE)
        torch.testing.assert_close(c, a, **SAME_TOLERANCE)


def test_the_same_vector_beside_running_generation(
    tiny_model_dir: Path, prompts: list[list[int]]
) -> None:
    alone = vectors(make_llm(tiny_model_dir), prompts[:2], RAW["MEAN"], use_tqdm=False)
    llm = make_llm(tiny_model_dir, max_num_batched_tokens=32)
    engine = llm.engine
    greedy = SamplingParams(max_tokens=40, temperature=0.0, ignore_eos=True)
    for i, prompt in enumerate(make_prompts(3, 10, 30, seed=5)):
        engine.add_request(f"gen-{i}", prompt, greedy)
    for _ in range(3):  # the generations are decoding when the embedding requests come
        engine.step()
    beside = vectors(llm, prompts[:2], RAW["MEAN"], use_tqdm=False)
    for a, b in zip(alone, beside, strict=True):
        torch.testing.assert_close(b, a, **SAME_TOLERANCE)
    assert not engine.has_unfinished_requests()  # the generations ran to the end alongside


def test_the_same_vector_after_a_preemption(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    long_prompts = make_prompts(3, 60, 64, seed=3)
    alone = vectors(make_llm(tiny_model_dir), long_prompts, RAW["MEAN"], use_tqdm=False)
    # 9 blocks of 16 tokens: two generations growing to 120 tokens each cannot both fit, and the
    # embedding prompts, chunked 16 tokens a step beside them, are the newest: the victims.
    tight = make_llm(tiny_model_dir, num_kv_blocks=9, max_model_len=128, max_num_batched_tokens=16)
    greedy = SamplingParams(max_tokens=100, temperature=0.0, ignore_eos=True)
    for i, prompt in enumerate(make_prompts(2, 20, 20, seed=6)):
        tight.engine.add_request(f"gen-{i}", prompt, greedy)
    scheduler = tight.engine.scheduler
    preempt, victims = scheduler._preempt, list[str]()

    def recording(request: Any) -> None:
        victims.append(request.request_id)
        preempt(request)

    monkeypatch.setattr(scheduler, "_preempt", recording)
    got = vectors(tight, long_prompts, RAW["MEAN"], use_tqdm=False)
    assert any(v.startswith("offline-") for v in victims), victims  # an embedding request
    for a, b in zip(alone, got, strict=True):
        torch.testing.assert_close(b, a, **SAME_TOLERANCE)


def test_no_kv_block_is_left_held(llm: LLM, prompts: list[list[int]]) -> None:
    free_before = llm.stats().num_free_kv_blocks
    for kind in RAW:
        vectors(llm, prompts, RAW[kind], use_tqdm=False)
    stats = llm.stats()
    assert stats.num_free_kv_blocks == free_before == stats.num_kv_blocks
    assert stats.num_running == stats.num_waiting == 0


def test_mean_recomputes_a_cached_prefix_and_last_reuses_it(
    tiny_model_dir: Path, hf_tiny_model: Any
) -> None:
    llm = make_llm(tiny_model_dir)
    prompt = make_prompts(1, 70, 70, seed=9)[0]
    llm.generate([prompt], SamplingParams(max_tokens=1), use_tqdm=False)  # its blocks cached
    hidden = hf_hidden(hf_tiny_model, prompt)
    for kind, cached in (("MEAN", 0), ("CLS", 0), ("LAST", 64)):
        [output] = run_one(llm, prompt, RAW[kind])
        assert output.num_cached_tokens == cached, kind
        torch.testing.assert_close(output.pooling_output, reference(hidden, kind), **HF_TOLERANCE)


def run_one(llm: LLM, prompt: list[int], params: PoolingParams) -> list[Any]:
    """One embedding request through the engine, its finished RequestOutput."""
    engine = llm.engine
    request = engine.input_processor.process_pooling(f"one-{next(_ids)}", prompt, params)
    engine.output_processor.add_request(engine.add_engine_request(request))
    outputs = []
    while engine.has_unfinished_requests():
        outputs += engine.step()
    return outputs


def test_truncate_prompt_tokens_keeps_the_last_tokens(llm: LLM, prompts: list[list[int]]) -> None:
    prompt = prompts[0] + prompts[1]
    [cut] = vectors(llm, [prompt], RAW["MEAN"], truncate_prompt_tokens=10, use_tqdm=False)
    [tail] = vectors(llm, [prompt[-10:]], RAW["MEAN"], use_tqdm=False)
    torch.testing.assert_close(cut, tail, **SAME_TOLERANCE)


def test_a_prompt_may_fill_the_whole_context(tiny_model_dir: Path) -> None:
    llm = make_llm(tiny_model_dir, max_model_len=64)
    [full] = llm.embed(make_prompts(1, 64, 64)[0], use_tqdm=False)
    assert full.outputs.hidden_size == 64
    with pytest.raises(PromptTooLongError, match="maximum context length is 64 tokens"):
        llm.embed(make_prompts(1, 65, 65)[0], use_tqdm=False)
    with pytest.raises(InvalidRequestError, match="greater than this model's maximum context"):
        llm.embed([5, 6], truncate_prompt_tokens=65, use_tqdm=False)


def test_dimensions_need_a_matryoshka_model(llm: LLM, tmp_path: Path, hf_tiny_model: Any) -> None:
    with pytest.raises(InvalidRequestError, match="does not support Matryoshka") as error:
        llm.embed([5, 6, 7], PoolingParams(dimensions=8), use_tqdm=False)
    assert error.value.param == "dimensions"
    model_dir = make_tiny_llama_dir(tmp_path / "matryoshka", matryoshka_dimensions=[16, 32])
    matryoshka = make_llm(model_dir)
    prompt = make_prompts(1, 20, 20, seed=4)[0]
    [got] = vectors(matryoshka, [prompt], PoolingParams(dimensions=16), use_tqdm=False)
    # Cut to the first 16 values, then normalized (the weights are the tiny model's: same seed).
    want = F.normalize(hf_hidden(hf_tiny_model, prompt)[-1][:16], dim=0)
    torch.testing.assert_close(got, want, **HF_TOLERANCE)
    with pytest.raises(InvalidRequestError, match="one of this model's Matryoshka dimensions"):
        matryoshka.embed([prompt], PoolingParams(dimensions=8), use_tqdm=False)


def test_bad_pooling_params_are_refused() -> None:
    with pytest.raises(InvalidRequestError, match="pooling_type must be one of"):
        PoolingParams(pooling_type="max")
    with pytest.raises(InvalidRequestError, match="dimensions must be at least 1"):
        PoolingParams(dimensions=0)
    with pytest.raises(InvalidRequestError, match="truncate_prompt_tokens must be -1"):
        PoolingParams(truncate_prompt_tokens=0)
