"""One structured log line per finished request: who, how many tokens, how fast, why it ended.

Never the prompt text, unless the server runs with --log-prompts (a debugging aid: prompts are
user data).
"""

from __future__ import annotations

import json
import logging

from engine.server.request_stream import RequestStream

logger = logging.getLogger("pagedock.requests")


def log_request_finished(stream: RequestStream, finished_time: float, log_prompts: bool) -> None:
    timing = stream.timing
    ttft = timing.first_token_time
    record: dict[str, object] = {
        "event": "request_finished",
        "request_id": stream.request_id,
        "prompt_tokens": stream.num_prompt_tokens,
        "generated_tokens": timing.num_generated_tokens,
        "ttft_ms": None if ttft is None else round((ttft - timing.arrival_time) * 1000, 1),
        "total_ms": round((finished_time - timing.arrival_time) * 1000, 1),
        "finish_reason": ",".join(sorted(set(timing.finish_reasons.values()))) or None,
    }
    if log_prompts:
        record["prompt"] = stream.prompt
    logger.info(json.dumps(record))
