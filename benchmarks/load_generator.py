"""Online load generator: streams completions from an OpenAI-compatible server and measures them.

    python benchmarks/load_generator.py --url http://127.0.0.1:8000 --concurrency 16
    python benchmarks/load_generator.py --url http://127.0.0.1:8000 --rate 4 --num-requests 64

Requests go out at a fixed concurrency (a new one as soon as one finishes) or as a Poisson process
at --rate requests/s (optionally capped by --concurrency). Each request streams, so time to first
token (TTFT) and inter-token latency (ITL: the gaps between streamed chunks) are measured as a
client sees them; output token counts come from the final usage chunk. Reports output tokens/s,
TTFT / ITL / end-to-end p50 and p99, and errors. Workload A's token-id prompts by default.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.workloads import Workload, workload_a


@dataclass
class RequestResult:
    ok: bool
    num_output_tokens: int = 0
    ttft_s: float | None = None
    e2e_s: float = 0.0
    itl_s: list[float] = field(default_factory=list)
    error: str | None = None


@dataclass
class LoadReport:
    num_requests: int
    num_errors: int
    duration_s: float
    output_tok_s: float
    ttft_p50_ms: float
    ttft_p90_ms: float
    ttft_p99_ms: float
    ttft_mean_ms: float
    itl_p50_ms: float
    itl_p99_ms: float
    e2e_p50_ms: float
    e2e_p99_ms: float
    errors: list[str]

    def summary(self) -> str:
        return (
            f"{self.num_requests} requests, {self.num_errors} errors in {self.duration_s:.1f}s: "
            f"{self.output_tok_s:.1f} output tok/s; TTFT p50 {self.ttft_p50_ms:.0f} ms, p99 "
            f"{self.ttft_p99_ms:.0f} ms; ITL p50 {self.itl_p50_ms:.1f} ms, p99 "
            f"{self.itl_p99_ms:.1f} ms; e2e p50 {self.e2e_p50_ms:.0f} ms, "
            f"p99 {self.e2e_p99_ms:.0f} ms"
        )


async def send_one(
    client: httpx.AsyncClient, model: str | None, prompt: list[int] | str, max_tokens: int
) -> RequestResult:
    body: dict[str, Any] = {
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if model is not None:
        body["model"] = model
    started = time.perf_counter()
    result = RequestResult(ok=False)
    last = started
    try:
        async with client.stream("POST", "/v1/completions", json=body) as response:
            if response.status_code != 200:
                result.error = f"HTTP {response.status_code}: {(await response.aread())[:200]!r}"
                return result
            async for line in response.aiter_lines():
                last = _read_event(line, result, started, last)
        result.ok = result.error is None
    except httpx.HTTPError as e:
        result.error = f"{type(e).__name__}: {e}"
    result.e2e_s = time.perf_counter() - started
    return result


def _read_event(line: str, result: RequestResult, started: float, last: float) -> float:
    """Record one SSE line; returns the time of the newest content chunk."""
    if not line.startswith("data: ") or line == "data: [DONE]":
        return last
    event = json.loads(line[6:])
    if "error" in event:
        result.error = str(event["error"].get("message"))
        return last
    if event.get("usage"):
        result.num_output_tokens = int(event["usage"]["completion_tokens"])
    if not any(c.get("text") for c in event.get("choices", [])):
        return last
    now = time.perf_counter()
    if result.ttft_s is None:
        result.ttft_s = now - started
    else:
        result.itl_s.append(now - last)
    return now


async def run_load(
    url: str,
    workload: Workload,
    concurrency: int | None = 16,
    rate: float | None = None,
    model: str | None = None,
    api_key: str | None = None,
    seed: int = 0,
) -> LoadReport:
    """Send every prompt of the workload; at most `concurrency` in flight, arrivals Poisson at
    `rate` per second when given (else all at once, limited by concurrency)."""
    results, duration = await send_all(url, workload, concurrency, rate, model, api_key, seed)
    return summarize(results, duration)


async def send_all(
    url: str,
    workload: Workload,
    concurrency: int | None = 16,
    rate: float | None = None,
    model: str | None = None,
    api_key: str | None = None,
    seed: int = 0,
) -> tuple[list[RequestResult], float]:
    """`run_load`'s requests, each one's result kept (to pool samples over runs), and the
    duration."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    limits = httpx.Limits(max_connections=max(concurrency or 0, 64) + 8)
    limit = asyncio.Semaphore(concurrency or len(workload.prompts))
    rng = random.Random(seed)
    async with httpx.AsyncClient(
        base_url=url, headers=headers, timeout=600, limits=limits
    ) as client:

        async def one(prompt: list[int]) -> RequestResult:
            async with limit:
                return await send_one(client, model, prompt, workload.max_tokens)

        started = time.perf_counter()
        tasks = []
        for prompt in workload.prompts:
            tasks.append(asyncio.create_task(one(prompt)))
            if rate:
                await asyncio.sleep(rng.expovariate(rate))
        results = await asyncio.gather(*tasks)
        duration = time.perf_counter() - started
    return list(results), duration


def summarize(results: list[RequestResult], duration_s: float) -> LoadReport:
    ok = [r for r in results if r.ok]
    ttfts = [r.ttft_s for r in ok if r.ttft_s is not None]
    itls = [gap for r in ok for gap in r.itl_s]
    return LoadReport(
        num_requests=len(results),
        num_errors=len(results) - len(ok),
        duration_s=duration_s,
        output_tok_s=sum(r.num_output_tokens for r in ok) / duration_s,
        ttft_p50_ms=percentile(ttfts, 50) * 1000,
        ttft_p90_ms=percentile(ttfts, 90) * 1000,
        ttft_p99_ms=percentile(ttfts, 99) * 1000,
        ttft_mean_ms=statistics.fmean(ttfts) * 1000 if ttfts else float("nan"),
        itl_p50_ms=percentile(itls, 50) * 1000,
        itl_p99_ms=percentile(itls, 99) * 1000,
        e2e_p50_ms=percentile([r.e2e_s for r in ok], 50) * 1000,
        e2e_p99_ms=percentile([r.e2e_s for r in ok], 99) * 1000,
        errors=sorted({r.error for r in results if r.error})[:5],
    )


def percentile(values: list[float], pct: int) -> float:
    if not values:
        return float("nan")
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[pct - 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--model", help="model name to send (default: the server's)")
    parser.add_argument("--api-key")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--rate", type=float, help="Poisson arrivals per second")
    parser.add_argument("--num-requests", type=int, default=64)
    parser.add_argument("--vocab-size", type=int, default=49152, help="for workload A's token ids")
    parser.add_argument("--json", type=Path, help="also write the report here")
    args = parser.parse_args()
    workload = workload_a(args.vocab_size, args.num_requests)
    report = asyncio.run(
        run_load(args.url, workload, args.concurrency, args.rate, args.model, args.api_key)
    )
    print(report.summary())
    for error in report.errors:
        print(f"  error: {error}")
    if args.json:
        args.json.write_text(json.dumps(asdict(report), indent=2))


if __name__ == "__main__":
    main()
