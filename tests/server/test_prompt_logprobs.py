"""Prompt logprobs on the server: /v1/completions' `echo` with `logprobs` (the prompt tokens'
entries, then the generated ones; streamed too, and with max_tokens 0), vLLM's `prompt_logprobs`
field on completions and chat, and lm-eval's loglikelihood request exactly as its
`local-completions` model sends it, summed as lm-eval sums it, against transformers float32."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch

from engine.config import EngineConfig
from tests.server.inprocess_server import InProcessServer

LOGLIKELIHOOD_ATOL = 1e-3  # a sum of a few float32 logprobs, each within ~1e-5 of transformers'


@pytest.fixture(scope="module")
def server(tiny_model_dir: Path) -> Iterator[InProcessServer]:
    config = EngineConfig(
        model=str(tiny_model_dir),
        dtype="float32",
        max_model_len=256,
        num_kv_blocks=64,
        num_threads=1,
        max_num_batched_tokens=16,  # prompts prefill in several chunks
    )
    server = InProcessServer(config).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def hf_model(tiny_model_dir: Path) -> Any:
    from transformers import LlamaForCausalLM

    return LlamaForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()


def post(server: InProcessServer, body: dict[str, Any], path: str = "/v1/completions") -> Any:
    response = httpx.post(
        f"{server.url}{path}", json={"model": server.ctx.served_model_name, **body}, timeout=60
    )
    assert response.status_code == 200, response.text
    return response.json()


def refused(server: InProcessServer, body: dict[str, Any], path: str = "/v1/completions") -> Any:
    response = httpx.post(
        f"{server.url}{path}", json={"model": server.ctx.served_model_name, **body}, timeout=60
    )
    assert response.status_code == 400, response.text
    return response.json()["error"]


def tokens_of(server: InProcessServer, text: str) -> list[int]:
    tokenizer = server.engine.tokenizer
    assert tokenizer is not None
    return tokenizer.encode(text)


def lm_eval_loglikelihood(
    server: InProcessServer, requests: list[tuple[list[int], list[int]]]
) -> list[tuple[float, bool]]:
    """lm-eval 0.4.9's `local-completions` loglikelihood: its request body
    (LocalCompletionsAPI._create_payload, generate=False, tokenized prompts) and its reading of
    the answer (parse_logprobs), kept to the letter."""
    payload = {
        "model": server.ctx.served_model_name,
        "prompt": [context + continuation for context, continuation in requests],
        "temperature": 0,
        "max_tokens": 1,
        "logprobs": 1,
        "seed": 1234,
        "echo": True,
    }
    response = httpx.post(f"{server.url}/v1/completions", json=payload, timeout=60)
    assert response.status_code == 200, response.text
    out = response.json()
    res = []
    ctxlens = [len(context) for context, _ in requests]
    for choice, ctxlen in zip(
        sorted(out["choices"], key=lambda c: c["index"]), ctxlens, strict=True
    ):
        logprobs = sum(choice["logprobs"]["token_logprobs"][ctxlen:-1])
        tokens_logprobs = choice["logprobs"]["token_logprobs"][ctxlen:-1]
        top_logprobs = choice["logprobs"]["top_logprobs"][ctxlen:-1]
        is_greedy = all(
            tok == max(top.values()) for tok, top in zip(tokens_logprobs, top_logprobs, strict=True)
        )
        res.append((logprobs, is_greedy))
    return res


def transformers_loglikelihood(
    model: Any, context: list[int], continuation: list[int]
) -> tuple[float, bool]:
    with torch.inference_mode():
        logits = model(torch.tensor([context + continuation])).logits[0].float()
    logprobs = logits[len(context) - 1 : -1].log_softmax(dim=-1)
    targets = torch.tensor(continuation)
    total = float(logprobs.gather(1, targets.unsqueeze(1)).sum())
    return total, bool((logprobs.argmax(dim=-1) == targets).all())


def test_lm_eval_loglikelihood_requests_sum_as_transformers_does(
    server: InProcessServer, hf_model: Any
) -> None:
    requests = [
        (tokens_of(server, "The quick brown fox jumps"), tokens_of(server, " over the lazy dog.")),
        (tokens_of(server, "Paged attention keeps KV memory"), tokens_of(server, " in blocks")),
        ([5, 17, 300, 41, 9, 250, 33] * 6, [77, 12]),  # several chunks before the continuation
    ]
    got = lm_eval_loglikelihood(server, requests)
    for (total, greedy), (context, continuation) in zip(got, requests, strict=True):
        expected_total, expected_greedy = transformers_loglikelihood(
            hf_model, context, continuation
        )
        assert abs(total - expected_total) < LOGLIKELIHOOD_ATOL
        assert greedy == expected_greedy


def test_a_greedy_continuation_reads_as_greedy(server: InProcessServer, hf_model: Any) -> None:
    context = tokens_of(server, "Continuous batching re-forms")
    with torch.inference_mode():
        continuation = [int(hf_model(torch.tensor([context])).logits[0, -1].argmax())]
    [(_, greedy)] = lm_eval_loglikelihood(server, [(context, continuation)])
    assert greedy


def test_echo_with_logprobs_covers_the_prompt_then_the_generated_tokens(
    server: InProcessServer,
) -> None:
    prompt = "Prefix caching reuses the blocks"
    body = {"prompt": prompt, "max_tokens": 3, "temperature": 0, "ignore_eos": True}
    plain = post(server, {**body, "logprobs": 2})["choices"][0]
    echoed = post(server, {**body, "logprobs": 2, "echo": True})["choices"][0]
    num_prompt = len(tokens_of(server, prompt))
    logprobs = echoed["logprobs"]
    assert echoed["text"] == prompt + plain["text"]
    assert len(logprobs["tokens"]) == num_prompt + 3
    assert logprobs["token_logprobs"][0] is None and logprobs["top_logprobs"][0] is None
    assert all(lp <= 0 for lp in logprobs["token_logprobs"][1:])
    # Each prompt position: its token's entry first, then up to 2 alternatives.
    for token, lp, top in zip(
        logprobs["tokens"][1:num_prompt],
        logprobs["token_logprobs"][1:num_prompt],
        logprobs["top_logprobs"][1:num_prompt],
        strict=True,
    ):
        assert next(iter(top)) == token and top[token] == lp and 2 <= len(top) <= 3
    assert "".join(logprobs["tokens"][:num_prompt]) == prompt
    assert logprobs["text_offset"][:num_prompt] == offsets(logprobs["tokens"][:num_prompt])
    for key in ("tokens", "token_logprobs", "top_logprobs"):
        assert logprobs[key][num_prompt:] == plain["logprobs"][key]
    assert logprobs["text_offset"][num_prompt:] == [
        len(prompt) + o for o in plain["logprobs"]["text_offset"]
    ]


def offsets(tokens: list[str]) -> list[int]:
    return [sum(len(t) for t in tokens[:i]) for i in range(len(tokens))]


def test_streamed_echo_with_logprobs_reads_as_the_whole_answer(server: InProcessServer) -> None:
    body = {
        "prompt": "The quick brown fox",
        "max_tokens": 4,
        "temperature": 0,
        "ignore_eos": True,
        "echo": True,
        "logprobs": 1,
        "n": 2,
    }
    whole = post(server, body)["choices"]
    chunks = streamed(server, body)
    assert not any("prompt_logprobs" in c for chunk in chunks for c in chunk["choices"])
    for index in (0, 1):
        mine = [c for chunk in chunks for c in chunk["choices"] if c["index"] == index]
        first = mine[0]
        assert first["text"].startswith("The quick brown fox")  # the echo, with its logprobs
        assert first["logprobs"]["token_logprobs"][0] is None
        assert "".join(c["text"] for c in mine) == whole[index]["text"]
        for key in ("tokens", "token_logprobs", "top_logprobs", "text_offset"):
            joined = [x for c in mine for x in c["logprobs"][key]]
            assert joined == whole[index]["logprobs"][key]


def streamed(server: InProcessServer, body: dict[str, Any]) -> list[dict[str, Any]]:
    chunks = []
    with httpx.stream(
        "POST",
        f"{server.url}/v1/completions",
        json={"model": server.ctx.served_model_name, **body, "stream": True},
    ) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunks.append(json.loads(line[len("data: ") :]))
    return chunks


@pytest.mark.parametrize("stream", [False, True])
def test_echo_with_max_tokens_zero_returns_the_prompt_alone(
    server: InProcessServer, stream: bool
) -> None:
    prompt = "Paged attention keeps"
    body = {"prompt": prompt, "max_tokens": 0, "echo": True, "logprobs": 0}
    if stream:
        choices = [c for chunk in streamed(server, body) for c in chunk["choices"]]
        text = "".join(c["text"] for c in choices)
        tokens = [t for c in choices for t in c["logprobs"]["tokens"]]
        finish = choices[-1]["finish_reason"]
    else:
        [choice] = post(server, body)["choices"]
        text, tokens, finish = choice["text"], choice["logprobs"]["tokens"], choice["finish_reason"]
    assert text == prompt
    assert "".join(tokens) == prompt and len(tokens) == len(tokens_of(server, prompt))
    assert finish == "length"


def test_the_prompt_logprobs_field_has_vllms_shape(server: InProcessServer) -> None:
    prompt = tokens_of(server, "The quick brown fox jumps")
    body = {"prompt": prompt, "max_tokens": 2, "prompt_logprobs": 2}
    [choice] = post(server, body)["choices"]
    field = choice["prompt_logprobs"]
    assert len(field) == len(prompt) and field[0] is None
    for token_id, entry in zip(prompt[1:], field[1:], strict=True):
        assert next(iter(entry)) == str(token_id)  # JSON keys: the token id as text
        assert set(entry[str(token_id)]) == {"logprob", "rank", "decoded_token"}
        ranks = sorted(e["rank"] for k, e in entry.items() if k != str(token_id))
        assert ranks[:2] == [1, 2]
    assert choice["logprobs"] is None  # the field alone asks for no echo


def test_chat_answers_carry_the_conversations_prompt_logprobs(server: InProcessServer) -> None:
    messages = [{"role": "user", "content": "The quick brown fox"}]
    body = {"messages": messages, "max_tokens": 2, "prompt_logprobs": 0}
    answer = post(server, body, "/v1/chat/completions")
    rendered = httpx.post(f"{server.url}/tokenize", json={"messages": messages}).json()
    field = answer["prompt_logprobs"]
    assert len(field) == rendered["count"] and field[0] is None
    assert all(len(entry) == 1 for entry in field[1:])


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"prompt": "abc", "prompt_logprobs": 21}, "prompt_logprobs"),
        ({"prompt": "abc", "prompt_logprobs": -1}, "prompt_logprobs"),
        ({"prompt": "abc", "prompt_logprobs": 2, "stream": True}, "prompt_logprobs"),
        ({"prompt": "abc", "max_tokens": 0}, "max_tokens"),
        ({"prompt": "abc", "echo": True, "logprobs": 21}, "logprobs"),
    ],
)
def test_bad_prompt_logprobs_requests_are_refused(
    server: InProcessServer, body: dict[str, Any], param: str
) -> None:
    error = refused(server, body)
    assert error["param"] == param and error["type"] == "invalid_request_error"


def test_the_chat_prompt_logprobs_field_is_refused_in_a_stream(server: InProcessServer) -> None:
    body = {"messages": [{"role": "user", "content": "x"}], "prompt_logprobs": 1, "stream": True}
    error = refused(server, body, "/v1/chat/completions")
    assert error["param"] == "prompt_logprobs"
    assert "not returned in a stream" in error["message"]
