"""32 concurrent streaming requests: each gets exactly the greedy output it gets alone."""

from __future__ import annotations

import asyncio

from openai import AsyncOpenAI, OpenAI

from tests.server.server_process import ServerProcess

NUM_REQUESTS = 32
PROMPTS = [
    f"Request {i}: the quick brown fox {'jumps ' * (i % 7)}over" for i in range(NUM_REQUESTS)
]
PARAMS = {"max_tokens": 24, "temperature": 0.0, "extra_body": {"ignore_eos": True}}


async def _stream_one(client: AsyncOpenAI, model: str, prompt: str) -> str:
    stream = await client.completions.create(model=model, prompt=prompt, stream=True, **PARAMS)  # type: ignore[call-overload]
    return "".join([c.choices[0].text async for c in stream if c.choices])


def test_concurrent_streams_equal_their_solo_greedy_outputs(
    tiny_server: ServerProcess, model_name: str
) -> None:
    solo_client = OpenAI(base_url=f"{tiny_server.url}/v1", api_key="unused", max_retries=0)
    solo = [
        solo_client.completions.create(model=model_name, prompt=p, **PARAMS).choices[0].text  # type: ignore[call-overload]
        for p in PROMPTS
    ]

    async def run_all() -> list[str]:
        client = AsyncOpenAI(
            base_url=f"{tiny_server.url}/v1", api_key="unused", max_retries=0, timeout=60
        )
        async with client:
            return await asyncio.gather(*(_stream_one(client, model_name, p) for p in PROMPTS))

    concurrent = asyncio.run(run_all())
    assert concurrent == solo
    assert len(set(solo)) > 1  # the prompts differ, so must the outputs: no cross-talk
