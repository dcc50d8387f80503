"""Structured outputs below the engine: the constraint's validation, the grammar compiler (errors,
cache, timeout), the bitmask and the sampler's use of it. The SmolLM2 tokenizer, no model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from engine.core.scheduler_output import ScheduledRequest
from engine.inputs.sampling_params import SamplingParams, StructuredOutputsParams
from engine.sampling.sampler import Sampler
from engine.sampling.sampling_batch import build_sampling_tensors
from engine.structured_outputs.grammar_compiler import GrammarCompiler
from engine.structured_outputs.structured_output_manager import (
    StructuredOutputManager,
    apply_grammar_bitmask,
    unpack_bitmask,
)
from pagedock.errors import InvalidRequestError
from pagedock.limits import MAX_STRUCTURED_OUTPUT_CHARS, MAX_STRUCTURED_OUTPUT_DEPTH
from pagedock.text.tokenizer import Tokenizer, load_tokenizer


@pytest.fixture(scope="module")
def tokenizer(smollm2_gguf_path: Path) -> Tokenizer:
    tok = load_tokenizer(smollm2_gguf_path)
    assert tok is not None
    return tok


@pytest.fixture(scope="module")
def compiler(tokenizer: Tokenizer) -> GrammarCompiler:
    vocab_size = len(tokenizer.vocabulary())
    return GrammarCompiler(tokenizer, vocab_size, sorted(tokenizer.eos_token_ids))


# ---- the constraint ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"regex": "a+", "choice": ["a"]}, {"json": {"type": "object"}, "json_object": True}],
)
def test_a_constraint_sets_exactly_one_kind(kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidRequestError, match="exactly one of json, regex, choice") as e:
        StructuredOutputsParams(**kwargs)
    assert e.value.param == "structured_outputs"


def test_a_json_schema_given_as_text_is_parsed() -> None:
    params = StructuredOutputsParams(json='{"type": "integer"}')
    assert params.json == {"type": "integer"}
    with pytest.raises(InvalidRequestError, match="not valid JSON"):
        StructuredOutputsParams(json="{not json")


def test_an_oversized_constraint_is_refused() -> None:
    with pytest.raises(InvalidRequestError, match="at most"):
        StructuredOutputsParams(regex="a" * (MAX_STRUCTURED_OUTPUT_CHARS + 1))


def nested_schema(depth: int) -> dict[str, Any]:
    """A schema of exactly `depth` levels of objects and arrays: {"items": {"items": ... {}}}."""
    schema: dict[str, Any] = {}
    for _ in range(depth - 1):
        schema = {"items": schema}
    return schema


@pytest.mark.parametrize("as_text", [False, True])
def test_a_schema_nested_past_the_limit_is_refused_naming_it(as_text: bool) -> None:
    StructuredOutputsParams(json=nested_schema(MAX_STRUCTURED_OUTPUT_DEPTH))
    deep = nested_schema(MAX_STRUCTURED_OUTPUT_DEPTH + 1)
    with pytest.raises(InvalidRequestError, match=f"at most {MAX_STRUCTURED_OUTPUT_DEPTH} levels"):
        StructuredOutputsParams(json=json.dumps(deep) if as_text else deep)


def test_schema_text_nested_past_the_parser_s_stack_is_refused_as_too_deep() -> None:
    text = '{"items": ' * 5000 + "{}" + "}" * 5000  # json.loads alone: RecursionError
    with pytest.raises(InvalidRequestError, match="nested too deeply") as e:
        StructuredOutputsParams(json=text)
    assert e.value.param == "structured_outputs"


def test_choices_must_be_non_empty_strings() -> None:
    with pytest.raises(InvalidRequestError, match="choice"):
        StructuredOutputsParams(choice=[])
    with pytest.raises(InvalidRequestError, match="non-empty"):
        StructuredOutputsParams(choice=["a", ""])


def test_equal_schemas_have_equal_keys_whatever_their_key_order() -> None:
    a = StructuredOutputsParams(json={"type": "object", "required": []})
    b = StructuredOutputsParams(json='{"required": [], "type": "object"}')
    assert a.key == b.key


def test_sampling_params_take_only_a_structured_outputs_params() -> None:
    with pytest.raises(InvalidRequestError, match="StructuredOutputsParams"):
        SamplingParams(structured_outputs={"json": {}})  # type: ignore[arg-type]


# ---- the compiler --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "problem"),
    [
        (StructuredOutputsParams(json={"type": "objekt"}), "objekt"),
        (StructuredOutputsParams(regex="a(b"), "parenthesis"),
        (StructuredOutputsParams(grammar="root ::= missing"), "missing"),
        (StructuredOutputsParams(grammar="root ::= a\na ::= a"), "matches no text"),
        (StructuredOutputsParams(grammar='root ::= a\na ::= a "x"'), "matches no text"),
    ],
)
def test_an_invalid_constraint_fails_naming_the_problem(
    compiler: GrammarCompiler, params: StructuredOutputsParams, problem: str
) -> None:
    with pytest.raises(InvalidRequestError, match=problem) as e:
        compiler.compile(params)
    assert e.value.param == "structured_outputs"
    assert ".cc:" not in str(e.value)  # xgrammar's C++ location is no use to a client


def test_a_grammar_matching_only_the_empty_text_compiles(compiler: GrammarCompiler) -> None:
    assert compiler.compile(StructuredOutputsParams(grammar='root ::= ""')) is not None


def test_a_failure_is_not_cached(compiler: GrammarCompiler) -> None:
    params = StructuredOutputsParams(regex="x(")
    with pytest.raises(InvalidRequestError):
        compiler.compile(params)
    assert params.key not in compiler._cache


def test_equal_constraints_share_one_compilation(compiler: GrammarCompiler) -> None:
    first = compiler.submit(StructuredOutputsParams(json={"type": "boolean"}))
    second = compiler.submit(StructuredOutputsParams(json='{"type": "boolean"}'))
    assert first is second
    assert first.result(timeout=60) is not None


def test_the_cache_is_bounded(tokenizer: Tokenizer) -> None:
    small = GrammarCompiler(tokenizer, len(tokenizer.vocabulary()), [], cache_size=2)
    for i in range(4):
        small.compile(StructuredOutputsParams(regex=f"a{{{i + 1}}}"))
    assert small.cache_len() == 2
    small.shutdown()


def test_a_compilation_past_the_timeout_fails_its_request(tokenizer: Tokenizer) -> None:
    impatient = GrammarCompiler(tokenizer, len(tokenizer.vocabulary()), [], timeout_s=0.0)
    with pytest.raises(InvalidRequestError, match="took longer than"):
        impatient.compile(StructuredOutputsParams(json={"type": "array"}))
    impatient.shutdown()


# ---- the bitmask and the sampler -----------------------------------------------------------


def test_the_bitmask_allows_exactly_the_grammar_s_next_tokens(
    compiler: GrammarCompiler, tokenizer: Tokenizer
) -> None:
    manager = StructuredOutputManager(compiler.vocab_size)
    compiled = compiler.compile(StructuredOutputsParams(choice=["yes", "no"]))
    manager.register("r", compiled, tokenizer.eos_token_ids)
    mask = manager.bitmask(["r"])
    assert mask is not None
    allowed = unpack_bitmask(mask[0], compiler.vocab_size)[0].nonzero().flatten().tolist()
    texts = {tokenizer.decode([t]) for t in allowed}
    assert "yes" in texts or "y" in texts
    assert all("yes".startswith(t) or "no".startswith(t) for t in texts)


def test_masking_matches_the_unpacked_bitmask(compiler: GrammarCompiler) -> None:
    manager = StructuredOutputManager(compiler.vocab_size)
    manager.register("g", compiler.compile(StructuredOutputsParams(regex="[0-9]+")), [])
    mask = manager.bitmask(["u", "g"])
    assert mask is not None and mask[1] == [1]
    logits = torch.randn(2, compiler.vocab_size)
    masked = apply_grammar_bitmask(logits, mask[0], mask[1])
    allowed = unpack_bitmask(mask[0], compiler.vocab_size)
    assert torch.equal(masked[0], logits[0])  # the unguided row is untouched
    assert torch.equal(torch.isfinite(masked[1]), allowed[1])


def _scheduled(request_id: str, params: SamplingParams) -> ScheduledRequest:
    return ScheduledRequest(request_id, [1], 0, [0], True, params, [1], [])


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_guided_row_constrains_only_itself(compiler: GrammarCompiler, temperature: float) -> None:
    manager = StructuredOutputManager(compiler.vocab_size)
    compiled = compiler.compile(StructuredOutputsParams(regex="[0-9]"))
    manager.register("guided", compiled, [])
    ids = ["a", "guided", "b"]
    params = SamplingParams(temperature=temperature, seed=3)
    batch = [_scheduled(r, params) for r in ids]
    logits = torch.randn(3, compiler.vocab_size) * 5
    gen = {r: torch.Generator().manual_seed(3) for r in ids}
    tensors = build_sampling_tensors(batch, lambda s: gen[s.request_id])
    mask = manager.bitmask(ids)
    assert mask is not None
    tensors.grammar_bitmask, tensors.grammar_rows = mask
    tokens = [t.token_id for t in Sampler(torch.Generator().manual_seed(0))(logits, tensors)]
    plain_gen = {r: torch.Generator().manual_seed(3) for r in ids}
    plain = build_sampling_tensors(batch, lambda s: plain_gen[s.request_id])
    unguided = [t.token_id for t in Sampler(torch.Generator().manual_seed(0))(logits, plain)]
    assert (tokens[0], tokens[2]) == (unguided[0], unguided[2])
    assert unpack_bitmask(mask[0], compiler.vocab_size)[1, tokens[1]]


def test_the_grammar_wins_over_a_min_tokens_ban(
    compiler: GrammarCompiler, tokenizer: Tokenizer
) -> None:
    """A complete grammar allows only end-of-sequence, which min_tokens bans: the row must still
    get a token the grammar accepts, not an arbitrary one."""
    manager = StructuredOutputManager(compiler.vocab_size)
    eos = sorted(tokenizer.eos_token_ids)
    manager.register("r", compiler.compile(StructuredOutputsParams(choice=["ok"])), eos)
    [ok] = tokenizer.encode("ok", add_special_tokens=False)
    assert manager.accept("r", ok) == (True, False)
    params = SamplingParams(temperature=0, min_tokens=5)
    batch = [ScheduledRequest("r", [1], 0, [0], True, params, [1], [ok], eos)]
    tensors = build_sampling_tensors(batch, lambda s: None)
    mask = manager.bitmask(["r"])
    assert mask is not None
    tensors.grammar_bitmask, tensors.grammar_rows = mask
    [token] = Sampler(torch.Generator())(torch.randn(1, compiler.vocab_size), tensors)
    assert token.token_id in eos
    assert manager.accept("r", token.token_id) == (True, True)


def test_released_states_are_gone(compiler: GrammarCompiler) -> None:
    manager = StructuredOutputManager(compiler.vocab_size)
    compiled = compiler.compile(StructuredOutputsParams(json_object=True))
    for i in range(3):
        manager.register(f"r{i}", compiled, [])
    manager.release(["r0"])
    manager.release_unless(lambda r: r == "r1")
    assert manager.num_live == 1 and manager.is_guided("r1")


def test_a_continuation_replays_its_prior_tokens_into_the_matcher(
    compiler: GrammarCompiler, tokenizer: Tokenizer
) -> None:
    from engine.structured_outputs.guided_decoding import GuidedDecoding
    from engine.worker.model_runner import ModelRunner

    guided = GuidedDecoding(tokenizer, compiler.vocab_size, sorted(tokenizer.eos_token_ids))
    runner = ModelRunner.__new__(ModelRunner)  # only its structured_outputs slot is used
    compiled = compiler.compile(StructuredOutputsParams(choice=["hello world"]))
    prior = tokenizer.encode("hello", add_special_tokens=False)
    guided.register(runner, ["ok"], compiled, [], prior)
    assert guided.manager is not None and runner.structured_outputs is guided.manager
    mask = guided.manager.bitmask(["ok"])
    assert mask is not None
    allowed = unpack_bitmask(mask[0], compiler.vocab_size)[0].nonzero().flatten().tolist()
    assert all(" world".startswith(tokenizer.decode([t])) for t in allowed)
    wrong = tokenizer.encode("goodbye", add_special_tokens=False)
    with pytest.raises(InvalidRequestError, match="continuation") as e:
        guided.register(runner, ["bad"], compiled, [], wrong)
    assert e.value.param == "continuation"
    assert not guided.manager.is_guided("bad")
