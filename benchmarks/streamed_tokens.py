"""Streamed requests that keep the token ids the server generated (`return_token_ids`, vLLM's
field), so that two servers' outputs can be compared token for token: chat completions (a list
of messages) or completions (a prompt of token ids), at a fixed concurrency, each timed as its
client sees it."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx


@dataclass
class Streamed:
    ok: bool = False
    token_ids: list[int] = field(default_factory=list)
    num_output_tokens: int = 0
    """The server's usage.completion_tokens."""
    ttft_s: float | None = None
    e2e_s: float = 0.0
    finish_reason: str | None = None
    error: str | None = None


def chat_body(messages: list[dict[str, Any]], max_tokens: int, ignore_eos: bool) -> dict[str, Any]:
    return {"messages": messages} | _common(max_tokens, ignore_eos)


def completion_body(prompt: list[int], max_tokens: int, ignore_eos: bool) -> dict[str, Any]:
    return {"prompt": prompt} | _common(max_tokens, ignore_eos)


def _common(max_tokens: int, ignore_eos: bool) -> dict[str, Any]:
    return {
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "ignore_eos": ignore_eos,
        "stream": True,
        "stream_options": {"include_usage": True},
        "return_token_ids": True,
    }


async def send_all(
    url: str, requests: list[tuple[str, dict[str, Any]]], concurrency: int
) -> tuple[list[Streamed], float]:
    """Every (path, body) POSTed, at most `concurrency` in flight (a new one as soon as one
    finishes, in order); each one's result, and the seconds from the first send to the last
    answer."""
    limit = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency + 4)
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as client:

        async def one(path: str, body: dict[str, Any]) -> Streamed:
            async with limit:
                return await send_one(client, path, body)

        started = time.perf_counter()
        results = await asyncio.gather(*(one(path, body) for path, body in requests))
        duration = time.perf_counter() - started
    return list(results), duration


async def send_one(client: httpx.AsyncClient, path: str, body: dict[str, Any]) -> Streamed:
    started = time.perf_counter()
    result = Streamed()
    try:
        async with client.stream("POST", path, json=body) as response:
            if response.status_code != 200:
                result.error = f"HTTP {response.status_code}: {(await response.aread())[:200]!r}"
                return result
            async for line in response.aiter_lines():
                read_event(line, result, started)
        result.ok = result.error is None
    except httpx.HTTPError as e:
        result.error = f"{type(e).__name__}: {e}"
    finally:
        result.e2e_s = time.perf_counter() - started
    return result


def read_event(line: str, result: Streamed, started: float) -> None:
    """One SSE line of a chat or completion stream into `result`: its token ids, the first one's
    time, the finish reason, the usage, an error."""
    if not line.startswith("data: ") or line == "data: [DONE]":
        return
    event = json.loads(line[6:])
    if "error" in event:
        result.error = str(event["error"].get("message"))
        return
    if event.get("usage"):
        result.num_output_tokens = int(event["usage"]["completion_tokens"])
    for choice in event.get("choices", []):
        token_ids = choice.get("token_ids") or []
        if token_ids and result.ttft_s is None:
            result.ttft_s = time.perf_counter() - started
        result.token_ids += token_ids
        result.finish_reason = choice.get("finish_reason") or result.finish_reason
