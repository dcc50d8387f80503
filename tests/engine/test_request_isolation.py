"""One client's bad request never harms another's: values no step can handle are refused where
they enter, naming the parameter; a request the sampler still fails on fails alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from engine import LLM, SamplingParams
from engine.core.scheduler_output import SampledToken
from engine.runtime.llm_engine import LLMEngine
from engine.runtime.outputs import RequestOutput
from engine.sampling.sampler import SamplingTensors
from pagedock.errors import InvalidRequestError
from pagedock.limits import MAX_INT32, MAX_STOP_STRING_CHARS, MAX_TOKEN_ID_LIST, SEED_MAX
from tests.tiny_model import TINY_VOCAB

NUM_KV_BLOCKS = 64
NEIGHBOURS = {"a": [5, 6, 7], "b": [8, 9, 10, 11]}
POISON_PROMPT = [12, 13]
# The poison's marker: the only request of the step with a ban (min_tokens bans its stop id).
POISON_STOP_ID = 7


@pytest.fixture(scope="module")
def llm(tiny_model_dir: Path) -> LLM:
    return LLM(model=str(tiny_model_dir), num_kv_blocks=NUM_KV_BLOCKS, max_model_len=128)


def neighbour_params() -> dict[str, SamplingParams]:
    return {
        "a": SamplingParams(max_tokens=6, temperature=0, ignore_eos=True),
        "b": SamplingParams(max_tokens=6, temperature=0.8, seed=1234, ignore_eos=True),
    }


def poison_params() -> SamplingParams:
    return SamplingParams(
        max_tokens=6, min_tokens=2, stop_token_ids=[POISON_STOP_ID], ignore_eos=True
    )


def run_to_completion(
    engine: LLMEngine, prompts: dict[str, tuple[list[int], SamplingParams]]
) -> dict[str, RequestOutput]:
    """Every request added in one go (so they share steps), stepped until all have finished."""
    for request_id, (prompt, params) in prompts.items():
        engine.add_request(request_id, prompt, params)
    finished: dict[str, RequestOutput] = {}
    while engine.has_unfinished_requests():
        for out in engine.step():
            if out.finished:
                finished[out.request_id] = out
    return finished


def neighbours_alone(engine: LLMEngine, tag: str) -> dict[str, list[int]]:
    params = neighbour_params()
    runs = {f"{tag}-{k}": (NEIGHBOURS[k], params[k]) for k in NEIGHBOURS}
    return {k.split("-")[-1]: o.token_ids for k, o in run_to_completion(engine, runs).items()}


def neighbours_with_poison(engine: LLMEngine, tag: str) -> dict[str, RequestOutput]:
    params = neighbour_params()
    runs = {f"{tag}-{k}": (NEIGHBOURS[k], params[k]) for k in NEIGHBOURS}
    runs[f"{tag}-poison"] = (POISON_PROMPT, poison_params())
    return {k.split("-")[-1]: o for k, o in run_to_completion(engine, runs).items()}


# ---- refused where they enter --------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "param"),
    [
        (dict(top_k=2**63), "top_k"),
        (dict(top_k=MAX_INT32 + 1), "top_k"),
        (dict(n=129), "n"),
        (dict(n=0), "n"),
        (dict(logprobs=21), "logprobs"),
        (dict(max_tokens=MAX_INT32 + 1), "max_tokens"),
        (dict(min_tokens=MAX_INT32 + 1, max_tokens=None), "min_tokens"),
        (dict(seed=SEED_MAX + 1), "seed"),
        (dict(stop=["x"] * 65), "stop"),
        (dict(stop=["x" * (MAX_STOP_STRING_CHARS + 1)]), "stop"),
        (dict(stop_token_ids=[1] * (MAX_TOKEN_ID_LIST + 1)), "stop_token_ids"),
        (dict(stop_token_ids=[2**63]), "stop_token_ids"),
        (dict(stop_token_ids=[-1]), "stop_token_ids"),
    ],
)
def test_out_of_range_sampling_params_are_refused_naming_the_param(
    params: dict[str, Any], param: str
) -> None:
    with pytest.raises(InvalidRequestError) as raised:
        SamplingParams(**params)
    assert raised.value.param == param


def test_stop_token_ids_outside_the_vocabulary_are_refused_by_the_engine(llm: LLM) -> None:
    params = SamplingParams(stop_token_ids=[TINY_VOCAB + 88], min_tokens=2)
    with pytest.raises(InvalidRequestError, match=r"stop_token_ids must be in \[0, 512\)") as e:
        llm.engine.add_request("oov-stop", "hi", params)
    assert e.value.param == "stop_token_ids"
    assert not llm.engine.has_unfinished_requests()


def test_prompt_token_ids_beyond_int32_are_refused_naming_the_prompt(llm: LLM) -> None:
    with pytest.raises(InvalidRequestError) as raised:
        llm.engine.add_request("huge-id", [5, 2**31, 2**64])
    assert raised.value.param == "prompt"


def test_the_largest_seed_with_n_children_samples_without_overflow(llm: LLM) -> None:
    params = SamplingParams(n=2, seed=SEED_MAX, max_tokens=3, ignore_eos=True)
    [out] = llm.generate([[5, 6, 7]], params, use_tqdm=False)
    assert [len(c.token_ids) for c in out.outputs] == [3, 3]
    assert llm.stats().num_free_kv_blocks == NUM_KV_BLOCKS


# ---- a sampling failure fails its request alone --------------------------------------------


def test_a_request_the_sampler_fails_on_fails_alone(
    llm: LLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = llm.engine
    expected = neighbours_alone(engine, "alone")
    # A ban outside the vocabulary that slipped past validation (an input processor that thinks
    # the vocabulary larger than it is): the real sampler's IndexError.
    monkeypatch.setattr(engine.input_processor, "vocab_size", TINY_VOCAB + 100)
    params = neighbour_params()
    runs = {k: (NEIGHBOURS[k], params[k]) for k in NEIGHBOURS}
    bad = SamplingParams(max_tokens=6, min_tokens=2, stop_token_ids=[TINY_VOCAB + 88])
    runs["poison"] = (POISON_PROMPT, bad)
    outs = run_to_completion(engine, runs)
    assert outs["poison"].finish_reason == "error" and "IndexError" in outs["poison"].error
    assert {k: outs[k].token_ids for k in NEIGHBOURS} == expected
    assert engine.stats().num_free_kv_blocks == NUM_KV_BLOCKS


def test_neighbours_of_a_failing_request_get_the_tokens_they_would_have_got(
    llm: LLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = llm.engine
    expected = neighbours_alone(engine, "alone")
    real_sampler = engine.runner.sampler

    def fails_on_the_poison(logits: torch.Tensor, t: SamplingTensors) -> list[SampledToken]:
        tokens = real_sampler(logits, t)  # every row's noise drawn first: generators advanced
        if any(POISON_STOP_ID in banned for banned in t.banned):
            raise RuntimeError("the sampler cannot handle this request")
        return tokens

    monkeypatch.setattr(engine.runner, "sampler", fails_on_the_poison)
    outs = neighbours_with_poison(engine, "mixed")
    assert outs["poison"].finish_reason == "error"
    assert "cannot handle" in outs["poison"].error
    assert {k: outs[k].token_ids for k in NEIGHBOURS} == expected
    assert all(outs[k].error is None for k in NEIGHBOURS)
    assert engine.stats().num_free_kv_blocks == NUM_KV_BLOCKS


def test_the_engine_serves_normally_after_a_sampling_failure(llm: LLM) -> None:
    engine = llm.engine
    expected = neighbours_alone(engine, "before")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(engine.input_processor, "vocab_size", TINY_VOCAB + 100)
        bad = SamplingParams(max_tokens=2, min_tokens=1, stop_token_ids=[TINY_VOCAB])
        run_to_completion(engine, {"oops": (POISON_PROMPT, bad)})
    assert neighbours_alone(engine, "after") == expected
    assert engine.stats().num_free_kv_blocks == NUM_KV_BLOCKS
