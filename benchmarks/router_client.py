"""The client side of the SmolLM2 router scenario: streamed chat completions, sent closed-loop (a
fixed number in flight) or open-loop (each at its arrival time, whatever is still running), each
measured as the client sees it: time to the first content token, output tokens, the prompt
tokens the engine found cached, and how it failed if it did."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from benchmarks.router_workload import ChatTurn

# Statuses that mean "not now" (the router's or an engine's admission control), not a fault.
REJECTION_STATUSES = (429, 503)


@dataclass
class Outcome:
    status: str  # "ok", "rejected" or "error"
    ttft_s: float | None = None
    e2e_s: float = 0.0
    num_output_tokens: int = 0
    num_cached_tokens: int = 0
    detail: str | None = None
    replica: str | None = None
    """The replica that served it, as the router says (x-pagedock-replica)."""
    predicted_cached_tokens: int | None = None
    """The prompt tokens the router expected that replica to hold (its cost model's view)."""


def request_body(messages: list[dict[str, str]], max_tokens: int) -> dict[str, Any]:
    return {
        "messages": messages,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "ignore_eos": True,  # every request generates exactly max_tokens: equal work per policy
        "stream": True,
        "stream_options": {"include_usage": True},
    }


async def stream_chat(client: httpx.AsyncClient, url: str, body: dict[str, Any]) -> Outcome:
    started = time.perf_counter()
    outcome = Outcome("error")
    try:
        async with client.stream("POST", url + "/v1/chat/completions", json=body) as response:
            outcome.replica = response.headers.get("x-pagedock-replica")
            predicted = response.headers.get("x-pagedock-predicted-cached-tokens")
            outcome.predicted_cached_tokens = int(predicted) if predicted is not None else None
            if response.status_code != 200:
                rejected = response.status_code in REJECTION_STATUSES
                outcome.status = "rejected" if rejected else "error"
                outcome.detail = f"HTTP {response.status_code}: {(await response.aread())[:200]!r}"
                return outcome
            async for line in response.aiter_lines():
                _read_event(line, outcome, started)
        outcome.status = "ok" if outcome.detail is None else "error"
    except httpx.HTTPError as e:
        outcome.detail = f"{type(e).__name__}: {e}"
    finally:
        outcome.e2e_s = time.perf_counter() - started
    return outcome


def _read_event(line: str, outcome: Outcome, started: float) -> None:
    if not line.startswith("data: ") or line == "data: [DONE]":
        return
    event = json.loads(line[6:])
    if "error" in event:
        outcome.detail = str(event["error"].get("message"))
    if usage := event.get("usage"):
        outcome.num_output_tokens = int(usage.get("completion_tokens", 0))
        details = usage.get("prompt_tokens_details") or {}
        outcome.num_cached_tokens = int(details.get("cached_tokens") or 0)
    has_content = any(c.get("delta", {}).get("content") for c in event.get("choices", []))
    if has_content and outcome.ttft_s is None:
        outcome.ttft_s = time.perf_counter() - started


def _client(num_connections: int) -> httpx.AsyncClient:
    limits = httpx.Limits(
        max_connections=num_connections + 8, max_keepalive_connections=num_connections + 8
    )
    return httpx.AsyncClient(timeout=900.0, limits=limits)


async def closed_loop(
    url: str, turns: Sequence[ChatTurn], concurrency: int, max_tokens: int
) -> tuple[list[Outcome], float]:
    """Every turn, in order, `concurrency` in flight: the next one starts as soon as one ends."""
    semaphore = asyncio.Semaphore(concurrency)
    async with _client(concurrency) as client:

        async def one(turn: ChatTurn) -> Outcome:
            async with semaphore:
                return await stream_chat(client, url, request_body(turn.messages, max_tokens))

        started = time.perf_counter()
        outcomes = list(await asyncio.gather(*(one(t) for t in turns)))
        return outcomes, time.perf_counter() - started


async def open_loop(
    url: str, turns: Sequence[ChatTurn], arrivals_s: Sequence[float], max_tokens: int
) -> tuple[list[Outcome], float]:
    """Turn i sent at arrivals_s[i] after the start, whether or not earlier ones have finished;
    the duration runs from the first arrival to the last response."""
    async with _client(len(turns)) as client:
        loop = asyncio.get_running_loop()
        start = loop.time()

        async def one(turn: ChatTurn, at_s: float) -> Outcome:
            await asyncio.sleep(max(0.0, start + at_s - loop.time()))
            return await stream_chat(client, url, request_body(turn.messages, max_tokens))

        outcomes = list(
            await asyncio.gather(*(one(t, a) for t, a in zip(turns, arrivals_s, strict=True)))
        )
        return outcomes, loop.time() - start


async def sequential(url: str, bodies: Sequence[dict[str, Any]]) -> list[Outcome]:
    """One request at a time (the unloaded calibration)."""
    async with _client(1) as client:
        return [await stream_chat(client, url, body) for body in bodies]
