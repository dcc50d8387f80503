"""Bad input gets a typed error with a message, and the engine keeps serving everyone else."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine import LLM, SamplingParams
from pagedock.errors import (
    ConfigError,
    InvalidRequestError,
    PromptTooLongError,
    UnknownRequestError,
)


@pytest.fixture(scope="module")
def llm(tiny_model_dir: Path) -> LLM:
    return LLM(model=str(tiny_model_dir), num_kv_blocks=64, max_model_len=128)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (dict(max_tokens=0), "max_tokens must be at least 1"),
        (dict(max_tokens=-3), "max_tokens must be at least 1"),
        (dict(top_p=0.0), "top_p must be in (0, 1]"),
        (dict(top_p=1.5), "top_p must be in (0, 1]"),
        (dict(temperature=-0.1), "temperature must be non-negative"),
        (dict(top_k=-5), "top_k must be -1"),
        (dict(presence_penalty=3.0), "presence_penalty must be in [-2, 2]"),
        (dict(min_tokens=5, max_tokens=2), "min_tokens (5) must not exceed max_tokens (2)"),
    ],
)
def test_bad_sampling_params_are_rejected_with_a_message(params: dict, message: str) -> None:
    with pytest.raises(
        InvalidRequestError,
        match=message.replace("(", r"\(")
        .replace(")", r"\)")
        .replace("[", r"\[")
        .replace("]", r"\]"),
    ):
        SamplingParams(**params)


def test_an_empty_prompt_is_rejected(llm: LLM) -> None:
    with pytest.raises(InvalidRequestError, match="the prompt is empty"):
        llm.engine.add_request("empty-ids", [])
    with pytest.raises(InvalidRequestError, match="the prompt is empty"):
        llm.engine.add_request("empty-text", "")


def test_a_prompt_longer_than_max_model_len_is_rejected_with_the_numbers(llm: LLM) -> None:
    with pytest.raises(PromptTooLongError, match=r"the prompt has 200 tokens.*128"):
        llm.engine.add_request("long", [5] * 200)
    with pytest.raises(PromptTooLongError, match="120 in the prompt, 20 to generate"):
        llm.engine.add_request("long2", [5] * 120, SamplingParams(max_tokens=20))


def test_token_ids_outside_the_vocabulary_are_rejected(llm: LLM) -> None:
    with pytest.raises(InvalidRequestError, match=r"token ids must be integers in \[0, 512\)"):
        llm.engine.add_request("oov", [1, 2, 99999])


def test_aborting_an_unknown_request_names_it(llm: LLM) -> None:
    with pytest.raises(UnknownRequestError, match="no request with id 'nope'"):
        llm.engine.abort_request("nope")


def test_the_engine_keeps_serving_after_bad_requests(llm: LLM) -> None:
    for bad in ([], [5] * 500):
        with pytest.raises(InvalidRequestError):
            llm.engine.add_request(f"bad-{len(bad)}", bad)
    outs = llm.generate(
        [[5, 6, 7], [8, 9]], SamplingParams(max_tokens=4, ignore_eos=True), use_tqdm=False
    )
    assert [len(o.token_ids) for o in outs] == [4, 4]
    assert llm.stats().num_free_kv_blocks == 64


def test_aborting_a_running_request_frees_its_blocks_and_reports_abort(llm: LLM) -> None:
    engine = llm.engine
    engine.add_request("to-abort", [5] * 40, SamplingParams(max_tokens=50, ignore_eos=True))
    engine.step()
    assert engine.stats().num_free_kv_blocks < 64
    out = engine.abort_request("to-abort")
    assert out is not None and out.finished and out.finish_reason == "abort"
    assert engine.stats().num_free_kv_blocks == 64
    assert not engine.has_unfinished_requests()


def test_a_pool_too_small_for_one_sequence_is_a_configuration_error(tiny_model_dir: Path) -> None:
    with pytest.raises(ConfigError, match="fewer than one sequence of max_model_len 512"):
        LLM(model=str(tiny_model_dir), num_kv_blocks=4, max_model_len=512)


def test_a_failing_step_fails_its_requests_not_the_engine(
    llm: LLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = llm.engine
    engine.add_request("doomed", [5, 6, 7], SamplingParams(max_tokens=3))

    def explode(*args: object, **kwargs: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(engine.runner.model, "forward", explode)
    outs = engine.step()
    assert [(o.request_id, o.finish_reason) for o in outs] == [("doomed", "error")]
    assert "boom" in (outs[0].error or "")
    monkeypatch.undo()
    assert llm.generate([[5, 6]], SamplingParams(max_tokens=2), use_tqdm=False)[0].token_ids
    assert engine.stats().num_free_kv_blocks == 64
