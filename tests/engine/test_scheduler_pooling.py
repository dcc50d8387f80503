"""The scheduler's side of embedding requests (torch-free): chunked like any prompt, never
sampled, finished with the runner's embedding once the prompt is computed, blocks freed; a
prefix-cache hit only before the first position the pooling reads."""

from __future__ import annotations

from typing import Any

from engine.core.request import Request
from engine.core.scheduler import Scheduler
from engine.core.scheduler_output import SchedulerOutput
from engine.inputs.pooling_params import PoolingParams
from tests.engine.factories import fake_runner_output, make_request, make_scheduler

EMBEDDING: Any = object()  # what the runner hands over (a tensor in the engine)


def embedding_request(prompt: list[int] | int, kind: str, request_id: str | None = None) -> Request:
    request = make_request(prompt, max_tokens=1, request_id=request_id)
    request.pooling_params = PoolingParams(pooling_type=kind).with_defaults("LAST", True)
    return request


def step(sched: Scheduler) -> tuple[SchedulerOutput, list[Any]]:
    output = sched.schedule()
    runner = fake_runner_output(output)
    for s in output.scheduled:
        done = s.num_computed_tokens + s.num_new_tokens == len(s.prompt_token_ids)
        if done and s.pooling_params is not None:
            runner.pooler_output[s.request_id] = EMBEDDING
    return output, sched.update(output, runner)


def test_an_embedding_request_is_chunked_pooled_and_freed() -> None:
    sched = make_scheduler(max_num_batched_tokens=16)
    request = embedding_request(40, "MEAN")
    sched.add_request(request)
    rows = []
    while True:
        output, cores = step(sched)
        [item] = output.scheduled
        assert not item.do_sample
        rows.append((item.pooling_offset, item.num_pooling_rows))
        if cores:
            break
    assert rows == [(0, 16), (0, 16), (0, 8)]  # every position of every chunk
    [core] = cores
    assert core.pooling_output is EMBEDDING and core.finish_reason == "stop"
    assert core.new_token_ids == [] and not sched.has_unfinished_requests()
    assert sched.kv_cache_manager.num_free_blocks == sched.kv_cache_manager.num_blocks


def test_last_and_cls_read_one_row() -> None:
    for kind, expected in (("LAST", [(0, 0), (0, 0), (7, 1)]), ("CLS", [(0, 1), (0, 0), (0, 0)])):
        sched = make_scheduler(max_num_batched_tokens=16)
        sched.add_request(embedding_request(40, kind))
        rows = []
        while sched.has_unfinished_requests():
            output, _ = step(sched)
            rows += [(s.pooling_offset, s.num_pooling_rows) for s in output.scheduled]
        assert rows == expected, kind


def test_only_last_pooling_takes_a_prefix_hit() -> None:
    sched = make_scheduler()
    prompt = list(range(1000, 1040))
    sched.add_request(make_request(prompt, max_tokens=1))
    step(sched)  # its blocks are cached
    for kind, cached in (("MEAN", 0), ("CLS", 0), ("LAST", 32)):
        sched.add_request(embedding_request(prompt, kind, request_id=f"embed-{kind}"))
        _, [core] = step(sched)
        assert core.num_cached_tokens == cached, kind


def test_a_missing_embedding_fails_the_request() -> None:
    sched = make_scheduler()
    sched.add_request(embedding_request(10, "LAST"))
    output = sched.schedule()
    [core] = sched.update(output, fake_runner_output(output))
    assert core.finish_reason == "error" and core.error and not sched.has_unfinished_requests()
