"""The InputProcessor is the one place a request is checked against the model: the offline engine,
the AsyncEngine and the render endpoints all refuse through it, with the same errors, and what it
makes (an EngineRequest) carries max_tokens resolved once."""

from __future__ import annotations

import asyncio
import dataclasses
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.core.request import Request, RequestTiming
from engine.inputs.engine_request import AdapterRef, EngineRequest
from engine.inputs.input_processor import InputProcessor
from engine.inputs.sampling_params import SamplingParams
from engine.sampling.parallel_sampling import child_requests
from pagedock.errors import InvalidRequestError, PromptTooLongError
from pagedock.protocol import CompletionRequest
from tests.tiny_model import TINY_VOCAB

ROOT = Path(__file__).resolve().parents[2]
MAX_MODEL_LEN = 128


class _Tokenizer:
    """What the processor asks of a tokenizer: one id per character."""

    def encode(self, text: str) -> list[int]:
        return [ord(c) % TINY_VOCAB for c in text]


def processor(tokenizer: Any = None) -> InputProcessor:
    return InputProcessor(tokenizer, TINY_VOCAB, MAX_MODEL_LEN)


# (prompt, params, prior output, the error, its message, its param): every refusal the
# processor makes, by the messages the engine has always answered with.
BAD_INPUTS: list[tuple[Any, dict[str, Any], list[int], type[Exception], str, str]] = [
    ([], {}, [], InvalidRequestError, "the prompt is empty", "prompt"),
    ("", {}, [], InvalidRequestError, "the prompt is empty", "prompt"),
    (
        [1, 2, 99999],
        {},
        [],
        InvalidRequestError,
        "token ids must be integers in [0, 512); got [99999]",
        "prompt",
    ),
    (
        [5, 2**31, -1],
        {},
        [],
        InvalidRequestError,
        "token ids must be integers in [0, 512); got [2147483648, -1]",
        "prompt",
    ),
    (
        [5, 6],
        {"stop_token_ids": [TINY_VOCAB + 88]},
        [],
        InvalidRequestError,
        "stop_token_ids must be in [0, 512); got [600]",
        "stop_token_ids",
    ),
    (
        [5] * 200,
        {},
        [],
        PromptTooLongError,
        "the prompt has 200 tokens; this model's maximum context length is 128 tokens, "
        "leaving no room to generate",
        "prompt",
    ),
    (
        [5] * 120,
        {"max_tokens": 20},
        [],
        PromptTooLongError,
        "this model's maximum context length is 128 tokens, but 140 were requested "
        "(120 in the prompt, 20 to generate)",
        "max_tokens",
    ),
    (
        [5, 6],
        {"n": 2},
        [7],
        InvalidRequestError,
        "a continuation resumes one completion: n must be 1",
        "n",
    ),
    (
        [5, 6],
        {},
        [7, TINY_VOCAB],
        InvalidRequestError,
        "continuation token ids must be in [0, 512); got [512]",
        "continuation",
    ),
    (
        [5, 6],
        {"max_tokens": 3},
        [7, 8, 9],
        InvalidRequestError,
        "the continuation already has 3 generated tokens, leaving none to generate within "
        "max_tokens and the context length (3 in all)",
        "continuation",
    ),
    (
        [5, 6],
        {"stop": ["\n"]},
        [],
        InvalidRequestError,
        "stop strings need a tokenizer; this model has none",
        "stop",
    ),
]


@pytest.mark.parametrize(
    ("prompt", "params", "prior", "error", "message", "param"),
    BAD_INPUTS,
    ids=[f"{case[-1]}-{i}" for i, case in enumerate(BAD_INPUTS)],
)
def test_the_processor_refuses_with_the_engines_errors(
    prompt: Any,
    params: dict[str, Any],
    prior: list[int],
    error: type[Exception],
    message: str,
    param: str,
) -> None:
    tokenizer = _Tokenizer() if isinstance(prompt, str) else None
    with pytest.raises(error, match=f"^{re.escape(message)}$") as raised:
        processor(tokenizer).process(
            "r", prompt, SamplingParams(**params), prior_output_token_ids=prior
        )
    assert getattr(raised.value, "param", None) == param


def test_a_text_prompt_needs_a_tokenizer() -> None:
    with pytest.raises(InvalidRequestError, match="this model has no tokenizer: pass token ids"):
        processor().process("r", "hello")


def test_a_lora_adapter_is_refused_when_lora_is_off() -> None:
    adapter = AdapterRef(name="sql", path="/adapters/sql")
    with pytest.raises(InvalidRequestError, match="LoRA is off on this engine") as e:
        processor().process("r", [5, 6], lora_request=adapter)
    assert e.value.param == "lora_request"


def lora_processor() -> InputProcessor:
    return InputProcessor(None, TINY_VOCAB, MAX_MODEL_LEN, {"sql": "/adapters/sql"})


def test_a_served_lora_adapter_is_accepted_by_name_or_by_its_path() -> None:
    for adapter in (AdapterRef("sql"), AdapterRef("sql", "/adapters/sql/")):
        request = lora_processor().process("r", [5, 6], lora_request=adapter)
        assert request.lora_request == adapter


@pytest.mark.parametrize(
    ("adapter", "message"),
    [
        (AdapterRef("chat"), "unknown LoRA adapter 'chat'; this engine serves: 'sql'"),
        (AdapterRef("sql", "/other"), "LoRA adapter 'sql' is served from /adapters/sql, not"),
    ],
)
def test_an_adapter_the_engine_does_not_serve_is_refused(adapter: AdapterRef, message: str) -> None:
    with pytest.raises(InvalidRequestError, match=message) as e:
        lora_processor().process("r", [5, 6], lora_request=adapter)
    assert e.value.param == "lora_request"


def test_max_tokens_is_resolved_once_in_a_copy_of_the_params() -> None:
    params = SamplingParams(max_tokens=None, temperature=0.0)
    request = processor().process("r", [5, 6, 7], params, arrival_time=12.5, priority=3)
    assert isinstance(request, EngineRequest)
    assert request.sampling_params.max_tokens == request.max_tokens == MAX_MODEL_LEN - 3
    assert params.max_tokens is None  # the caller's params are left as they were
    assert (request.request_id, request.prompt_token_ids) == ("r", [5, 6, 7])
    assert (request.arrival_time, request.priority, request.prompt) == (12.5, 3, None)
    assert request.lora_request is None and request.grammar is None
    given = processor().process("r", [5, 6, 7], SamplingParams(max_tokens=9))
    assert given.max_tokens == 9


def test_min_tokens_above_a_resolved_max_tokens_is_no_error() -> None:
    """max_tokens None means "to the context length", which ends the request first: as before."""
    params = SamplingParams(max_tokens=None, min_tokens=200)
    assert processor().process("r", [5] * 100, params).max_tokens == MAX_MODEL_LEN - 100


def test_a_text_prompt_is_tokenized_and_kept_and_ids_keep_their_text() -> None:
    request = processor(_Tokenizer()).process("r", "hi")
    assert (request.prompt, request.prompt_token_ids) == ("hi", _Tokenizer().encode("hi"))
    by_ids = processor().process("r", [5, 6], prompt_text="five six")
    assert by_ids.prompt == "five six"


def test_a_continuation_and_a_grammar_travel_with_the_request() -> None:
    grammar = object()
    request = processor().process(
        "r", [5, 6], SamplingParams(max_tokens=4), prior_output_token_ids=(7, 8), grammar=grammar
    )
    assert request.prior_output_token_ids == [7, 8] and request.grammar is grammar


def test_an_engine_request_is_frozen() -> None:
    request = processor().process("r", [5, 6])
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.request_id = "other"  # type: ignore[misc]


def test_the_scheduler_request_is_built_from_the_engine_request() -> None:
    engine_request = processor().process(
        "r", [5, 6], SamplingParams(max_tokens=None), prior_output_token_ids=[7], priority=2
    )
    timing = RequestTiming(engine_request.arrival_time)
    request = Request.from_engine_request(engine_request, (2,), timing)
    assert request.max_tokens == MAX_MODEL_LEN - 2 == request.sampling_params.max_tokens
    assert request.prompt_token_ids == [5, 6] and request.output_token_ids == [7]
    assert request.all_token_ids == [5, 6, 7] and request.eos_token_ids == {2}
    assert request.priority == 2 and request.timing is timing


def test_a_scheduler_request_needs_max_tokens_resolved() -> None:
    with pytest.raises(ValueError, match="max_tokens must be resolved"):
        Request(
            request_id="r", prompt_token_ids=[5], sampling_params=SamplingParams(max_tokens=None)
        )


def test_n_children_share_the_resolved_max_tokens_and_seed_apart() -> None:
    params = SamplingParams(n=3, seed=11, max_tokens=None, min_tokens=500)
    parent = processor().process("p", [5, 6], params)
    children = child_requests(parent)
    assert [c.request_id for c in children] == ["p#0", "p#1", "p#2"]
    assert [c.sampling_params.seed for c in children] == [11, 12, 13]
    assert {c.sampling_params.n for c in children} == {1}
    assert {c.max_tokens for c in children} == {MAX_MODEL_LEN - 2}
    assert parent.sampling_params.n == 3


def test_the_processor_is_the_only_caller_of_the_checks() -> None:
    """One place: no other module of the engine checks prompts, lengths or continuations."""
    checks = (
        "check_prompt_ids",
        "check_stop_token_ids",
        "resolve_max_tokens",
        "check_continuation",
    )
    callers = {
        str(path.relative_to(ROOT))
        for path in (ROOT / "engine").rglob("*.py")
        if any(re.search(rf"\b_?{name}\(", path.read_text()) for name in checks)
    }
    assert callers == {"engine/inputs/input_processor.py", "engine/inputs/continuation.py"}
    assert not (ROOT / "engine/inputs/request_checks.py").exists()


# ---- every way in refuses through the processor, with the same errors --------------------------

GENERATION_REFUSES = [
    {"prompt": [5, 10**9]},
    {"prompt": [5, 6], "stop_token_ids": [10**9]},
    {"prompt": [5] * 300},
    {"prompt": [5] * 100, "max_tokens": 100},
    {"prompt": []},
    {"prompt": [5, 6], "stream": True, "continuation": {"token_ids": [7, 10**9]}},
]


@pytest.fixture(scope="module")
def llm_engine(tiny_model_dir: Path) -> Iterator[Any]:
    from engine.config import EngineConfig
    from engine.runtime.llm_engine import LLMEngine

    engine = LLMEngine(
        EngineConfig(model=str(tiny_model_dir), max_model_len=MAX_MODEL_LEN, num_kv_blocks=32)
    )
    yield engine
    engine.shutdown()


def _refusal(fn: Any) -> tuple[type[Exception], str, str | None]:
    with pytest.raises(InvalidRequestError) as raised:
        fn()
    return type(raised.value), str(raised.value), raised.value.param


@pytest.mark.parametrize("body", GENERATION_REFUSES)
def test_render_offline_and_async_generation_refuse_alike(
    llm_engine: Any, body: dict[str, Any]
) -> None:
    from engine.runtime.async_engine import AsyncEngine
    from engine.server.openai.context import ServerContext, ServerOptions
    from engine.server.openai.render import render_completion_request
    from engine.server.openai.sampling import continuation_token_ids, to_sampling_params

    request = CompletionRequest(**body)
    params = to_sampling_params(request, request.max_tokens, request.logprobs)
    prompt: list[int] = body["prompt"]
    prior = continuation_token_ids(request, 1) or []
    ctx = ServerContext(
        engine=AsyncEngine(llm_engine),
        metrics=None,  # type: ignore[arg-type]
        kv_hub=None,  # type: ignore[arg-type]
        tokenizer=llm_engine.tokenizer,
        served_model_name="tiny",
        model_root="/models/tiny",
        max_model_len=MAX_MODEL_LEN,
        options=ServerOptions(),
    )
    rendered = _refusal(lambda: render_completion_request(ctx, request))

    def offline() -> None:
        llm_engine.input_processor.process("r", prompt, params, prior_output_token_ids=prior)

    async def online() -> None:
        engine = AsyncEngine(llm_engine)
        engine.start()
        try:
            await engine.add_request("r", prompt, params, prior_output_token_ids=prior)
        finally:
            await engine.shutdown()

    assert rendered == _refusal(offline) == _refusal(lambda: asyncio.run(online()))
    if not prior:
        assert rendered == _refusal(lambda: llm_engine.add_request("r", prompt, params))
    assert not llm_engine.has_unfinished_requests()
