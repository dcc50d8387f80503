"""GuideLLM and `vllm bench serve` read pagedock's answers right: the requests they sent
(captured, tests/server/data/) replayed against a server of this module's own, each answer
checked for what those tools read (their parsers' fields, not their code): ids, text, usage
(prompt, completion and cached tokens) and the chunks they count tokens and time by.

The server is this module's own, so that its prefix cache holds only what these tests sent and
each answer's `cached_tokens` can be predicted exactly (PrefixCacheModel).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.server.benchmark_client_requests import (
    Answer,
    PrefixCacheModel,
    captured,
    prompt_ids,
    replay,
)
from tests.server.conftest import tiny_server_args
from tests.server.inprocess_server import InProcessServer
from tests.server.server_process import ServerProcess, start_server

BLOCK_SIZE = 16
GUIDELLM = captured("guidellm")
VLLM_BENCH = captured("vllm_bench")


@pytest.fixture(scope="module")
def server(
    tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    # Enough KV blocks that nothing these tests send is evicted (the cache model assumes it).
    args = tiny_server_args(
        tiny_model_dir, "--block-size", str(BLOCK_SIZE), "--num-kv-blocks", "1024"
    )
    process = start_server(args, tmp_path_factory.mktemp("logs") / "benchmark-clients.log")
    yield process
    process.stop()


@pytest.fixture(scope="module")
def http(server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=60) as client:
        yield client


@pytest.fixture(scope="module")
def cache() -> PrefixCacheModel:
    return PrefixCacheModel(BLOCK_SIZE)


def _max_tokens(body: dict[str, Any]) -> int:
    return int(body.get("max_completion_tokens") or body["max_tokens"])


def _text(answer: Answer, chat: bool) -> str:
    """The generated text as the tools join it (chat: `delta.content`, else `text`)."""
    if answer.body is not None:
        choice = answer.body["choices"][0]
        return str((choice["message"]["content"] if chat else choice["text"]) or "")
    choices = [c["choices"][0] for c in answer.token_chunks]
    return "".join((c["delta"].get("content") if chat else c.get("text")) or "" for c in choices)


def _generate_and_check_usage(
    http: httpx.Client, cache: PrefixCacheModel, request: dict[str, Any], model: str
) -> Answer:
    """Replay a generation request; its usage must count the prompt as the server tokenizes it,
    exactly `max_tokens` generated (the tools send `ignore_eos`), and the cached tokens the
    prefix cache holds."""
    body = request["body"]
    ids = prompt_ids(http, body, model)
    expected_cached = cache.expected_cached(ids)
    answer = replay(http, request, model)
    cache.add(ids)
    assert answer.status == 200, answer
    usage = answer.usage
    assert usage["prompt_tokens"] == len(ids)
    assert usage["completion_tokens"] == _max_tokens(body)
    assert usage["total_tokens"] == len(ids) + _max_tokens(body)
    assert usage["prompt_tokens_details"]["cached_tokens"] == expected_cached
    if body.get("stream"):
        assert answer.done, "a stream must end with data: [DONE]"
        assert all("error" not in c for c in answer.chunks), answer.chunks
    return answer


def test_guidellm_finds_the_server_healthy_and_its_model(
    http: httpx.Client, model_name: str
) -> None:
    for request in GUIDELLM["probes"]:
        answer = replay(http, request, model_name)
        assert answer.status == 200, (request["path"], answer)
        if request["path"] == "/v1/models":
            assert answer.body is not None
            assert [m["id"] for m in answer.body["data"]] == [model_name]


@pytest.mark.parametrize("run", sorted(GUIDELLM["runs"]))
def test_guidellm_reads_text_and_usage_of_each_answer(
    http: httpx.Client, cache: PrefixCacheModel, model_name: str, run: str
) -> None:
    chat = "chat" in run
    for request in GUIDELLM["runs"][run]:
        answer = _generate_and_check_usage(http, cache, request, model_name)
        # GuideLLM takes the response id from the answer or from the stream's first chunk.
        first = answer.body if answer.body is not None else answer.chunks[0]
        assert first is not None and first["id"]
        # It rejects an answer with neither text nor output tokens as unusable.
        assert _text(answer, chat) or answer.usage["completion_tokens"] > 0
        if request["body"].get("stream_options", {}).get("continuous_usage_stats"):
            _check_continuous_usage(answer)


def _check_continuous_usage(answer: Answer) -> None:
    """Each chunk's usage (vLLM's `continuous_usage_stats`) counts the tokens so far: never
    down, never past the final count."""
    counts = [c["usage"]["completion_tokens"] for c in answer.chunks]
    assert counts == sorted(counts), counts
    assert counts[-1] == answer.usage["completion_tokens"]


@pytest.mark.parametrize("run", sorted(VLLM_BENCH["runs"]))
def test_vllm_bench_reads_tokens_and_usage_of_each_stream(
    http: httpx.Client, cache: PrefixCacheModel, model_name: str, run: str
) -> None:
    chat = "chat" in run
    for request in VLLM_BENCH["runs"][run]:
        answer = _generate_and_check_usage(http, cache, request, model_name)
        # It reads usage only from a chunk without choices: the last one must be such.
        last = answer.chunks[-1]
        assert last["choices"] == [] and last["usage"], last
        # Every chunk with choices is one token arrival to it (TTFT, then one ITL each): none
        # may come without a token; chat's role chunk goes with the first.
        tokens = answer.usage["completion_tokens"]
        assert len(answer.token_chunks) <= tokens + (1 if chat else 0)
        if chat:
            assert all("delta" in c["choices"][0] for c in answer.token_chunks)
        assert isinstance(_text(answer, chat), str)


def test_vllm_bench_aligns_its_prompts_with_tokenize_and_detokenize(
    http: httpx.Client, model_name: str
) -> None:
    """Before a random or prefix-repetition run it tokenizes a prompt without special tokens
    (`tokens`) and, when its tokenizer disagrees with the server's, cuts the prompts to length
    through /detokenize (`prompt`)."""
    for request in VLLM_BENCH["alignment"]:
        answer = replay(http, request, model_name)
        assert answer.status == 200 and answer.body is not None, answer
        if request["path"] == "/tokenize":
            tokens = answer.body["tokens"]
            assert tokens and all(isinstance(t, int) for t in tokens)
            with_special = http.post(
                "/tokenize",
                json={**request["body"], "model": model_name, "add_special_tokens": True},
            ).json()["tokens"]
            assert len(with_special) >= len(tokens)
        else:
            assert isinstance(answer.body["prompt"], str)


def test_vllm_bench_scrapes_metrics(http: httpx.Client, model_name: str) -> None:
    """It reads /metrics (Prometheus text) before and after a run, for speculative decoding."""
    for request in VLLM_BENCH["metrics_probes"]:
        answer = replay(http, request, model_name)
        assert answer.status == 200 and answer.content_type.startswith("text/plain"), answer


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_continuous_usage_counts_the_tokens_sent_so_far(
    http: httpx.Client, model_name: str, path: str
) -> None:
    body: dict[str, Any] = {
        "model": model_name,
        "max_tokens": 6,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        "return_token_ids": True,
    }
    if path == "/v1/completions":
        body["prompt"] = "Paged attention keeps"
    else:
        body["messages"] = [{"role": "user", "content": "Paged attention keeps"}]
    request = {"method": "POST", "path": path, "headers": {}, "body": body}
    answer = replay(http, request, model_name)
    sent = 0
    for chunk in answer.token_chunks:
        sent += len(chunk["choices"][0].get("token_ids") or [])
        assert chunk["usage"]["completion_tokens"] == sent, answer.chunks
        assert chunk["usage"]["prompt_tokens"] == answer.usage["prompt_tokens"]
    assert sent == 6 and answer.usage["completion_tokens"] == 6


@pytest.fixture
def failing_prefill(inprocess_server: InProcessServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """The next step (a request's prefill, before its first token) raises."""
    runner = inprocess_server.engine.runner
    real_execute = runner.execute
    failures = iter([RuntimeError("injected prefill failure")])

    def execute(*args: Any, **kwargs: Any) -> Any:
        failure = next(failures, None)
        if failure is not None:
            raise failure
        return real_execute(*args, **kwargs)

    monkeypatch.setattr(runner, "execute", execute)


def test_a_chat_stream_sends_its_role_chunk_with_the_first_token(
    inprocess_server: InProcessServer, failing_prefill: None
) -> None:
    """Not before it, as vLLM: `vllm bench serve` takes the first chunk with choices for the
    first token. A request that fails before its first token gets the error and no role."""
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "stream": True}
    request = {"method": "POST", "path": "/v1/chat/completions", "headers": {}, "body": body}
    with httpx.Client(base_url=inprocess_server.url, timeout=30) as http:
        answer = replay(http, request, "")
        assert [list(c) for c in answer.chunks] == [["error"]] and answer.done
        ok = replay(http, request, "")
    assert ok.token_chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert len(ok.token_chunks) > 1 and ok.done
