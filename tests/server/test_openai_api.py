"""The official `openai` client against a live `pagedock serve` (tiny random model)."""

from __future__ import annotations

import httpx
import pytest
from openai import OpenAI

from tests.server.server_process import ServerProcess

MESSAGES = [{"role": "user", "content": "The quick brown fox"}]
GREEDY = {"temperature": 0.0, "extra_body": {"ignore_eos": True}}


@pytest.fixture(scope="module")
def client(tiny_server: ServerProcess) -> OpenAI:
    return OpenAI(base_url=f"{tiny_server.url}/v1", api_key="unused", max_retries=0, timeout=30)


def test_chat_completion_has_openai_shape_and_usage(
    client: OpenAI, model_name: str, tiny_server: ServerProcess
) -> None:
    response = client.chat.completions.create(
        model=model_name, messages=MESSAGES, max_tokens=8, **GREEDY
    )  # type: ignore[arg-type]
    choice = response.choices[0]
    assert response.object == "chat.completion" and response.id.startswith("chatcmpl-")
    assert response.model == model_name
    assert choice.message.role == "assistant" and isinstance(choice.message.content, str)
    assert choice.finish_reason == "length"
    prompt = httpx.post(f"{tiny_server.url}/tokenize", json={"messages": MESSAGES}).json()
    assert response.usage is not None
    assert response.usage.prompt_tokens == prompt["count"]
    assert response.usage.completion_tokens == 8
    assert response.usage.total_tokens == prompt["count"] + 8


def test_completion_has_openai_shape_and_usage(client: OpenAI, model_name: str) -> None:
    response = client.completions.create(
        model=model_name, prompt="Paged attention", max_tokens=5, **GREEDY
    )  # type: ignore[arg-type]
    assert response.object == "text_completion" and response.id.startswith("cmpl-")
    assert response.choices[0].finish_reason == "length"
    assert response.usage is not None and response.usage.completion_tokens == 5


def test_streamed_chat_text_equals_non_streamed_for_greedy(client: OpenAI, model_name: str) -> None:
    whole = client.chat.completions.create(
        model=model_name, messages=MESSAGES, max_tokens=24, **GREEDY
    )  # type: ignore[arg-type]
    stream = client.chat.completions.create(
        model=model_name, messages=MESSAGES, max_tokens=24, stream=True, **GREEDY
    )  # type: ignore[arg-type]
    chunks = list(stream)
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert streamed == whole.choices[0].message.content
    assert chunks[-1].choices[0].finish_reason == "length"


def test_streamed_completion_text_equals_non_streamed_for_greedy(
    client: OpenAI, model_name: str
) -> None:
    whole = client.completions.create(
        model=model_name, prompt="Prefix caching", max_tokens=24, **GREEDY
    )  # type: ignore[arg-type]
    stream = client.completions.create(
        model=model_name, prompt="Prefix caching", max_tokens=24, stream=True, **GREEDY
    )  # type: ignore[arg-type]
    assert "".join(c.choices[0].text for c in stream if c.choices) == whole.choices[0].text


def test_stream_ends_with_usage_chunk_when_asked(client: OpenAI, model_name: str) -> None:
    stream = client.chat.completions.create(
        model=model_name,
        messages=MESSAGES,
        max_tokens=6,
        stream=True,
        stream_options={"include_usage": True},
        **GREEDY,  # type: ignore[arg-type]
    )
    chunks = list(stream)
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 6
    assert all(c.usage is None for c in chunks[:-1])


def test_n_returns_n_indexed_choices_that_differ(client: OpenAI, model_name: str) -> None:
    response = client.chat.completions.create(
        model=model_name,
        messages=MESSAGES,
        max_tokens=8,
        n=3,
        temperature=1.0,
        seed=7,
        extra_body={"ignore_eos": True},
    )
    assert sorted(c.index for c in response.choices) == [0, 1, 2]
    assert response.usage is not None and response.usage.completion_tokens == 3 * 8
    assert len({c.message.content for c in response.choices}) > 1


def test_streamed_n_choices_match_non_streamed_with_seed(client: OpenAI, model_name: str) -> None:
    kwargs = {
        "model": model_name,
        "prompt": "Continuous batching",
        "max_tokens": 10,
        "n": 2,
        "temperature": 1.0,
        "seed": 3,
    }
    whole = client.completions.create(**kwargs)  # type: ignore[call-overload]
    texts = {0: "", 1: ""}
    for chunk in client.completions.create(stream=True, **kwargs):  # type: ignore[call-overload]
        for choice in chunk.choices:
            texts[choice.index] += choice.text
    assert texts == {c.index: c.text for c in whole.choices}


def test_stop_string_ends_the_text_before_it(client: OpenAI, model_name: str) -> None:
    prompt = "The quick brown fox jumps"
    full = (
        client.completions.create(model=model_name, prompt=prompt, max_tokens=24, **GREEDY)
        .choices[0]
        .text
    )  # type: ignore[arg-type]
    stop = full[len(full) // 2 : len(full) // 2 + 2]
    assert stop.strip(), f"no usable stop string in {full!r}"
    choice = client.completions.create(
        model=model_name, prompt=prompt, max_tokens=24, stop=[stop], **GREEDY
    ).choices[0]  # type: ignore[arg-type]
    assert choice.text == full[: full.index(stop)]
    assert choice.finish_reason == "stop"


def test_chat_logprobs_have_top_alternatives(client: OpenAI, model_name: str) -> None:
    response = client.chat.completions.create(
        model=model_name, messages=MESSAGES, max_tokens=5, logprobs=True, top_logprobs=3, **GREEDY
    )  # type: ignore[arg-type]
    content = response.choices[0].logprobs.content  # type: ignore[union-attr]
    assert content is not None and len(content) == 5
    for token in content:
        assert len(token.top_logprobs) == 3
        # Greedy: the chosen token is the most likely one.
        assert token.logprob == pytest.approx(max(t.logprob for t in token.top_logprobs), abs=1e-4)


def test_completion_logprobs_have_legacy_shape(client: OpenAI, model_name: str) -> None:
    response = client.completions.create(
        model=model_name, prompt="Paged", max_tokens=4, logprobs=2, **GREEDY
    )  # type: ignore[arg-type]
    logprobs = response.choices[0].logprobs
    assert logprobs is not None
    assert len(logprobs.tokens or []) == len(logprobs.token_logprobs or []) == 4
    assert all(len(top) == 2 for top in logprobs.top_logprobs or [])
    assert logprobs.text_offset == sorted(logprobs.text_offset or [])


def test_echo_prepends_the_prompt(client: OpenAI, model_name: str) -> None:
    plain = client.completions.create(
        model=model_name, prompt="Paged attention", max_tokens=4, **GREEDY
    )  # type: ignore[arg-type]
    echoed = client.completions.create(
        model=model_name, prompt="Paged attention", max_tokens=4, echo=True, **GREEDY
    )  # type: ignore[arg-type]
    assert echoed.choices[0].text == "Paged attention" + plain.choices[0].text


def test_echo_with_logprobs_reads_in_the_openai_client(client: OpenAI, model_name: str) -> None:
    """The prompt's entries first (the first one null), then the generated tokens'
    (tests/server/test_prompt_logprobs.py checks the values)."""
    echoed = client.completions.create(
        model=model_name, prompt="Paged attention", max_tokens=2, echo=True, logprobs=1, **GREEDY
    )  # type: ignore[arg-type]
    logprobs = echoed.choices[0].logprobs
    assert logprobs is not None and logprobs.token_logprobs is not None
    assert logprobs.token_logprobs[0] is None and logprobs.top_logprobs is not None
    assert "".join(logprobs.tokens or []) == echoed.choices[0].text


def test_same_seed_gives_same_sample(client: OpenAI, model_name: str) -> None:
    def sample() -> str | None:
        r = client.chat.completions.create(
            model=model_name,
            messages=MESSAGES,
            max_tokens=12,
            temperature=1.0,
            top_p=0.9,
            seed=1234,
        )
        return r.choices[0].message.content

    assert sample() == sample()


def test_vllm_extra_fields_are_accepted(client: OpenAI, model_name: str) -> None:
    response = client.completions.create(
        model=model_name,
        prompt="abc",
        max_tokens=6,
        user="someone",
        presence_penalty=0.5,
        frequency_penalty=0.5,
        extra_body={
            "top_k": 5,
            "min_tokens": 6,
            "repetition_penalty": 1.2,
            "ignore_eos": False,
            "stop_token_ids": [2],
            "skip_special_tokens": True,
        },
    )
    assert response.usage is not None and response.usage.completion_tokens == 6


def test_models_lists_the_served_model(client: OpenAI, model_name: str) -> None:
    assert [m.id for m in client.models.list()] == [model_name]


def test_tokenize_and_detokenize_round_trip(tiny_server: ServerProcess) -> None:
    tokens = httpx.post(
        f"{tiny_server.url}/tokenize", json={"prompt": "hello world", "add_special_tokens": False}
    ).json()
    assert tokens["count"] == len(tokens["tokens"]) > 0
    text = httpx.post(f"{tiny_server.url}/detokenize", json={"tokens": tokens["tokens"]}).json()
    assert text == {"prompt": "hello world"}


def test_version_and_health(tiny_server: ServerProcess) -> None:
    assert httpx.get(f"{tiny_server.url}/health").status_code == 200
    version = httpx.get(f"{tiny_server.url}/version").json()
    assert "version" in version
    # Which CPU kernels run: JIT-built here (or none without a compiler), prebuilt in images.
    assert version["cpu_kernels"].split()[0] in ("jit", "torch")
