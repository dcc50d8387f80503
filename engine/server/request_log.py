"""One structured log line per finished request: who, how many tokens, how fast, why it ended.

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
        "ttft_ms": None if ttft is None else round((ttft - timing.arrival_time) * 1000, 1),
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
