"""One scenario of benchmarks/speculative_decode.py: a list of streamed requests sent to the
`off` and `on` servers at the same time, at one concurrency, and the records of both arms (the
outputs compared, the `on` server's draft counters)."""

from __future__ import annotations

import asyncio
import statistics
from collections import Counter
from dataclasses import dataclass
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.copy_workload import CopyRequest
from benchmarks.servers import Server
from benchmarks.speculative_report import ARMS, SPEC_COUNTERS, acceptance, compare_outputs
from benchmarks.streamed_tokens import Streamed, chat_body, completion_body, send_all

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"


@dataclass(frozen=True)
class Scenario:
    name: str
    requests: list[tuple[str, dict[str, Any]]]
    """(path, body) of each request, in sending order."""
    concurrency: int

    @classmethod
    def chat(
        cls, name: str, copies: list[CopyRequest], concurrency: int, max_tokens: int
    ) -> Scenario:
        """Chat requests that stop where the model stops (at most `max_tokens`)."""
        bodies = [(CHAT, chat_body(c.messages, max_tokens, ignore_eos=False)) for c in copies]
        return cls(name, bodies, concurrency)

    @classmethod
    def completions(
        cls, name: str, prompts: list[list[int]], concurrency: int, max_tokens: int = 128
    ) -> Scenario:
        """Completions of token-id prompts, exactly `max_tokens` each (ignore_eos)."""
        bodies = [(COMPLETIONS, completion_body(p, max_tokens, ignore_eos=True)) for p in prompts]
        return cls(name, bodies, concurrency)

    def records(
        self,
        results: dict[str, tuple[list[Streamed], float]],
        before: dict[str, float],
        after: dict[str, float],
        rep: int,
        placement: dict[str, int],
    ) -> list[dict[str, Any]]:
        """Both arms' records of one repetition; the `on` one with its outputs compared with
        the `off` one's and its drafts' acceptance."""
        records = []
        for arm in ARMS:
            streamed, duration = results[arm]
            records.append(
                {"scenario": self.name, "arm": arm, "repetition": rep, "core": placement[arm]}
                | arm_figures(streamed, duration)
            )
        off, on = ([s.token_ids for s in results[arm][0]] for arm in ARMS)
        records[-1] |= {"outputs_vs_off": compare_outputs(off, on)}
        records[-1] |= {"acceptance": acceptance(before, after)}
        return records


def arm_figures(streamed: list[Streamed], duration_s: float) -> dict[str, Any]:
    """Output tok/s (usage's completion tokens of every request over the scenario's wall time),
    and the requests' latencies as their clients saw them."""
    ok = [s for s in streamed if s.ok]
    ttfts = [s.ttft_s for s in ok if s.ttft_s is not None]
    num_output_tokens = sum(s.num_output_tokens for s in ok)
    return {
        "output_tok_s": num_output_tokens / duration_s,
        "num_output_tokens": num_output_tokens,
        "duration_s": round(duration_s, 3),
        "num_errors": len(streamed) - len(ok),
        "errors": sorted({s.error for s in streamed if s.error})[:3],
        "ttft_p50_ms": round(statistics.median(ttfts) * 1000, 1) if ttfts else None,
        "e2e_p50_ms": round(statistics.median(s.e2e_s for s in ok) * 1000, 1) if ok else None,
        "finish_reasons": dict(sorted(Counter(s.finish_reason or "none" for s in ok).items())),
    }


async def run_scenario(
    servers: dict[str, Server], scenario: Scenario
) -> dict[str, tuple[list[Streamed], float]]:
    """The scenario's requests sent to every arm's server at once."""
    sent = [send_all(servers[arm].url, scenario.requests, scenario.concurrency) for arm in ARMS]
    return dict(zip(ARMS, await asyncio.gather(*sent), strict=True))


async def warm_up(servers: dict[str, Server], warmup: Scenario) -> None:
    """The warm-up's requests through every server; an error if any failed."""
    for arm, (streamed, _) in (await run_scenario(servers, warmup)).items():
        failed = [s.error for s in streamed if not s.ok]
        if failed:
            raise RuntimeError(f"warm-up requests failed on the {arm} server: {failed[:3]}")


def scrape_counters(url: str) -> dict[str, float]:
    """The spec-decode counters on the server's /metrics (absent: none verified yet)."""
    text = httpx.get(f"{url}/metrics", timeout=30).text
    samples: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in SPEC_COUNTERS:
                samples[sample.name] = samples.get(sample.name, 0.0) + sample.value
    return samples
