"""The output path on its own: the same engine outputs, shaped by each output kind; stop strings."""

from __future__ import annotations

import random

import pytest

from engine.core.request import RequestTiming
from engine.core.scheduler_output import EngineCoreOutput, SampledToken
from engine.inputs.sampling_params import RequestOutputKind, SamplingParams
from engine.runtime.output_processor import NewRequest, OutputProcessor
from engine.runtime.outputs import RequestOutput
from engine.sampling.parallel_sampling import child_request_id
from pagedock.text.tokenizer import Tokenizer
from tests.tiny_model import TINY_VOCAB, save_tiny_tokenizer

DELTA, FINAL_ONLY = RequestOutputKind.DELTA, RequestOutputKind.FINAL_ONLY


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Tokenizer:
    path = tmp_path_factory.mktemp("tiny-tokenizer")
    save_tiny_tokenizer(path, TINY_VOCAB)
    return Tokenizer.from_hf_dir(path)


def new_request(request_id: str, n: int, kind: RequestOutputKind, **params: object) -> NewRequest:
    sampling = SamplingParams(n=n, output_kind=kind, logprobs=1, max_tokens=None, **params)  # type: ignore[arg-type]
    child_ids = [request_id] if n == 1 else [child_request_id(request_id, i) for i in range(n)]
    return NewRequest(request_id, None, [5, 6, 7], sampling, RequestTiming(0.0), child_ids)


def engine_steps(child_ids: list[str], seed: int) -> list[list[EngineCoreOutput]]:
    """Steps of random tokens (ids 3+: no special tokens) with logprobs; each child ends with
    'length' after its own number of steps."""
    rng = random.Random(seed)
    lengths = {c: rng.randint(5, 40) for c in child_ids}
    steps = []
    for step in range(max(lengths.values())):
        outputs = []
        for child_id, length in lengths.items():
            if step < length:
                token = rng.randrange(3, TINY_VOCAB)
                sampled = SampledToken(token, -rng.random(), {token: -0.5})
                reason = "length" if step == length - 1 else None
                outputs.append(EngineCoreOutput(child_id, [token], reason, logprobs=[sampled]))
        steps.append(outputs)
    return steps


def run(
    tokenizer: Tokenizer, requests: list[NewRequest], steps: list[list[EngineCoreOutput]]
) -> list[RequestOutput]:
    processor = OutputProcessor(tokenizer)
    for request in requests:
        processor.add_request(request)
    return [out for step in steps for out in processor.process(step).outputs]


def concatenated(outputs: list[RequestOutput]) -> dict[tuple[str, int], tuple]:
    """Per (request, completion index): text, token ids, logprobs, finish and stop reason."""
    whole: dict[tuple[str, int], tuple] = {}
    for output in outputs:
        for c in output.outputs:
            text, ids, logprobs, _, _ = whole.get((output.request_id, c.index), ("", [], [], 0, 0))
            whole[output.request_id, c.index] = (
                text + c.text,
                ids + c.token_ids,
                logprobs + (c.logprobs or []),
                c.finish_reason,
                c.stop_reason,
            )
    return whole


@pytest.mark.parametrize(("n", "num_requests"), [(1, 1), (2, 1), (2, 3)])
def test_delta_outputs_concatenate_to_the_final_only_output(
    tokenizer: Tokenizer, n: int, num_requests: int
) -> None:
    ids = [f"req-{i}" for i in range(num_requests)]
    child_ids = [c for r in ids for c in new_request(r, n, DELTA).child_ids]
    steps = engine_steps(child_ids, seed=n * 10 + num_requests)
    deltas = run(tokenizer, [new_request(r, n, DELTA) for r in ids], steps)
    finals = run(tokenizer, [new_request(r, n, FINAL_ONLY) for r in ids], steps)
    assert concatenated(deltas) == concatenated(finals)
    assert len(concatenated(deltas)) == n * num_requests


def test_each_delta_carries_only_its_steps_tokens(tokenizer: Tokenizer) -> None:
    steps = engine_steps(["req"], seed=1)
    outputs = run(tokenizer, [new_request("req", 1, DELTA)], steps)
    assert [o.outputs[0].token_ids for o in outputs] == [s[0].new_token_ids for s in steps]
    assert [o.finished for o in outputs] == [False] * (len(steps) - 1) + [True]


def test_final_only_returns_one_output_with_every_completion(tokenizer: Tokenizer) -> None:
    steps = engine_steps([child_request_id("req", i) for i in range(3)], seed=2)
    outputs = run(tokenizer, [new_request("req", 3, FINAL_ONLY)], steps)
    assert len(outputs) == 1 and outputs[0].finished
    assert [c.index for c in outputs[0].outputs] == [0, 1, 2]
    lengths = {c.request_id: 0 for s in steps for c in s}
    for step in steps:
        for core in step:
            lengths[core.request_id] += 1
    assert [len(c.token_ids) for c in outputs[0].outputs] == list(lengths.values())


def test_a_stop_string_ends_the_completion_and_later_tokens_are_dropped(
    tokenizer: Tokenizer,
) -> None:
    text_ids = tokenizer.encode(" the lazy dog. Paged attention")
    processor = OutputProcessor(tokenizer)
    processor.add_request(new_request("req", 1, DELTA, stop=["dog"]))
    outputs, stopped = [], []
    for token in [*text_ids, *text_ids]:  # the engine goes on until it is told to finish
        processed = processor.process([EngineCoreOutput("req", [token])])
        outputs += processed.outputs
        stopped += processed.stopped_by_string
    assert stopped == ["req"]
    assert "".join(o.outputs[0].text for o in outputs) == " the lazy "
    last = outputs[-1].outputs[0]
    assert outputs[-1].finished and (last.finish_reason, last.stop_reason) == ("stop", "dog")
    assert processor.num_unfinished_requests == 0


def test_timing_is_filled_once_per_step_and_reported_when_finished(tokenizer: Tokenizer) -> None:
    processor = OutputProcessor(tokenizer)
    request = new_request("req", 1, DELTA)
    processor.add_request(request)
    first = processor.process([EngineCoreOutput("req", [40])], now=1.0).stats
    last = processor.process([EngineCoreOutput("req", [41], "length")], now=1.5).stats
    assert (first.time_to_first_tokens_s, first.num_prompt_tokens) == ([1.0], 3)
    assert last.inter_token_latencies_s == [0.5] and last.num_generation_tokens == 1
    assert [f.finish_reasons for f in last.finished] == [["length"]]
    timing = request.timing
    assert (timing.first_token_time, timing.finished_time, timing.num_generated_tokens) == (
        1.0,
        1.5,
        2,
    )
