"""Structured outputs through the official openai client against a live `pagedock serve` with the
built-in SmolLM2: twenty JSON schemas x greedy and sampled x streamed and not (all 80 requests
at once, one server), regex and choice, bad constraints answered with 400, and 100 guided
streams dropped by their clients leaving no grammar state and no KV block behind."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import openai
import pytest
from openai import OpenAI

from tests.eventually import eventually
from tests.server.server_process import ServerProcess, start_server
from tests.server.test_metrics import scrape
from tests.structured_schemas import SCHEMAS, prompt_for

pytestmark = pytest.mark.slow

MODEL = "smollm2-135m-instruct"
NUM_KV_BLOCKS = 512
# Generous: every schema's output is bounded well below it, so `length` means a bug.
MAX_TOKENS = 200


@pytest.fixture(scope="module")
def server(
    smollm2_gguf_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    args = ["--model", MODEL, "--max-model-len", "512", "--num-kv-blocks", str(NUM_KV_BLOCKS)]
    server = start_server(
        [*args, "--log-level", "warning"], tmp_path_factory.mktemp("logs") / "so.log"
    )
    yield server
    server.stop()


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> OpenAI:
    return OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=600)


def ask(
    client: OpenAI, what: str, schema: dict[str, Any], temperature: float, stream: bool
) -> tuple[str, str | None]:
    """One chat with response_format json_schema: (text, finish_reason)."""
    response_format = {
        "type": "json_schema",
        "json_schema": {"name": "answer", "schema": schema, "strict": True},
    }
    kwargs: dict[str, Any] = {
        "model": MODEL,
        "messages": [{"role": "user", "content": prompt_for(what)}],
        "max_tokens": MAX_TOKENS,
        "temperature": temperature,
        "seed": 1234,
        "response_format": response_format,
    }
    if not stream:
        choice = client.chat.completions.create(**kwargs).choices[0]
        return choice.message.content or "", choice.finish_reason
    text, finish = "", None
    for chunk in client.chat.completions.create(**kwargs, stream=True):
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
    return text, finish


def test_every_schema_validates_greedy_and_sampled_streamed_and_not(client: OpenAI) -> None:
    cases = [
        (what, schema, temperature, stream)
        for what, schema in SCHEMAS
        for temperature in (0.0, 1.0)
        for stream in (False, True)
    ]
    with ThreadPoolExecutor(len(cases)) as pool:
        results = list(pool.map(lambda c: ask(client, *c), cases))
    failures = []
    for (what, schema, temperature, stream), (text, finish) in zip(cases, results, strict=True):
        try:
            assert finish == "stop", f"finish_reason {finish}"
            jsonschema.validate(json.loads(text), schema)
        except (AssertionError, ValueError, jsonschema.ValidationError) as e:
            failures.append(f"{what} t={temperature} stream={stream}: {e}: {text!r}")
    assert not failures, "\n".join(failures)


def test_json_object_regex_and_choice(client: OpenAI) -> None:
    messages = [{"role": "user", "content": "Give me a code."}]
    made = client.chat.completions.create(
        model=MODEL,
        messages=messages,  # type: ignore[arg-type]
        max_tokens=MAX_TOKENS,
        temperature=0,
        response_format={"type": "json_object"},
    )
    # json_object bounds no length: a greedy object may still be inside a string at
    # max_tokens (float32 summation order decides which). Only a finished one must parse.
    if made.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(made.choices[0].message.content or ""), dict)
    else:
        assert (made.choices[0].message.content or "").lstrip().startswith("{")
    pattern = r"[A-Z]{3}-[0-9]{4}"
    coded = client.completions.create(
        model=MODEL,
        prompt="A product code:",
        max_tokens=30,
        temperature=1.0,
        extra_body={"structured_outputs": {"regex": pattern}},
    )
    assert re.fullmatch(pattern, coded.choices[0].text)
    assert coded.choices[0].finish_reason == "stop"
    picked = client.chat.completions.create(
        model=MODEL,
        messages=messages,  # type: ignore[arg-type]
        max_tokens=10,
        extra_body={"structured_outputs": {"choice": ["red", "green", "blue"]}},
    )
    assert picked.choices[0].message.content in ("red", "green", "blue")


@pytest.mark.parametrize(
    ("extra", "names"),
    [
        ({"structured_outputs": {"json": {"type": "objekt"}}}, "objekt"),
        ({"structured_outputs": {"regex": "(unclosed"}}, "parenthesis"),
        ({"structured_outputs": {"grammar": "root ::= nowhere"}}, "nowhere"),
        ({"structured_outputs": {"regex": "a", "choice": ["a"]}}, "exactly one"),
        ({"structured_outputs": {"json": "{not json"}}, "not valid JSON"),
        ({"structured_outputs": {"regex": "a" * 70000}}, "at most"),
        ({"guided_json": {"type": "object"}}, "structured_outputs"),
        ({"guided_choice": ["a", "b"]}, "structured_outputs"),
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, "schema"),
        ({"response_format": {"type": "xml"}}, "response_format"),
        (
            {"response_format": {"type": "json_object"}, "structured_outputs": {"regex": "a"}},
            "not both",
        ),
    ],
)
def test_a_bad_constraint_is_a_400_naming_the_problem(
    client: OpenAI, extra: dict[str, Any], names: str
) -> None:
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=5,
            extra_body=extra,
        )
    assert names in str(e.value)


def test_dropped_guided_streams_leave_no_grammar_state_or_kv_block(server: ServerProcess) -> None:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "List numbers as JSON."}],
        "max_tokens": 300,
        "stream": True,
        "structured_outputs": {"json": {"type": "array", "items": {"type": "integer"}}},
    }

    async def open_and_drop(http: httpx.AsyncClient, i: int) -> None:
        async with http.stream("POST", "/v1/chat/completions", json={**body, "seed": i}) as r:
            assert r.status_code == 200
            async for line in r.aiter_lines():
                if line.startswith("data:"):
                    return  # the first chunk: the request is running; leave

    async def run() -> None:
        limits = httpx.Limits(max_connections=100)
        async with httpx.AsyncClient(base_url=server.url, timeout=600, limits=limits) as http:
            await asyncio.gather(*(open_and_drop(http, i) for i in range(100)))
        samples: dict[str, float] = {}

        def settled() -> bool:
            samples.update(scrape(server))
            free = samples["pagedock:kv_cache_free_blocks"] == NUM_KV_BLOCKS
            return free and samples["pagedock:structured_output_grammars"] == 0

        await eventually(settled, timeout=300, what=lambda: f"metrics {samples}", interval=0.5)

    asyncio.run(run())
