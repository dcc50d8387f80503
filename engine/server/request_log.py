"""One structured log line per finished request: who, how many tokens, how fast, why it ended.

How fast is told apart as vLLM's request metrics do: the time to first token is the time queued
(arrival to first scheduled) and the prefill (first scheduled to first token, over
`prefill_steps` steps that computed part of its prompt; a step cut short is not one of them).

Never the prompt text, unless the server runs with --log-prompts (a debugging aid: prompts are
user data). The line also carries the tenant, the adapter, and the HTTP request's ids
(`x_request_id`, W3C `trace_id`: pagedock/http/request_context.py), which its generation
remembered under its id when it queued its engine requests (`<id>-<i>`): the line is written on the
engine's side, outside the request's context.
"""

from __future__ import annotations

import json
import logging

from engine.runtime.outputs import FinishedRequestStats, IterationStats
from pagedock.request_ids import remembered

logger = logging.getLogger("pagedock.requests")


class RequestLog:
    """An output listener of the async engine: logs the requests each step finished."""

    def __init__(self, log_prompts: bool) -> None:
        self.log_prompts = log_prompts

    def on_outputs(self, stats: IterationStats) -> None:
        for finished in stats.finished:
            log_request_finished(finished, self.log_prompts)


def log_request_finished(finished: FinishedRequestStats, log_prompts: bool) -> None:
    timing = finished.timing
    ttft = timing.first_token_time
    end = timing.finished_time or timing.arrival_time
    record: dict[str, object] = {
        "event": "request_finished",
        "request_id": finished.request_id,
        "prompt_tokens": finished.num_prompt_tokens,
        "generated_tokens": timing.num_generated_tokens,
        "ttft_ms": _ms(timing.arrival_time, ttft),
        "queued_ms": _ms(timing.arrival_time, timing.first_scheduled_time),
        "prefill_ms": _ms(timing.first_scheduled_time, ttft),
        "prefill_steps": len(timing.prefill_chunks),
        "total_ms": round((end - timing.arrival_time) * 1000, 1),
        "finish_reason": ",".join(sorted(set(finished.finish_reasons))) or None,
        "tenant": finished.tenant,
        "adapter": finished.lora_name,
    }
    ids = remembered(finished.request_id.split("-", 1)[0])
    if ids is not None:
        record |= ids.log_fields()
    if log_prompts:
        record["prompt"] = finished.prompt
    logger.info(json.dumps(record), extra={"fields": record})


def _ms(start: float | None, end: float | None) -> float | None:
    """From `start` to `end` in milliseconds, when both happened."""
    return None if start is None or end is None else round((end - start) * 1000, 1)
