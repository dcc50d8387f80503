"""Per-request accounting on the event loop: token timings into the metrics, and the log line when
a request ends. Timestamps are the engine thread's (when the step ended), not the loop's."""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.outputs import RequestOutput
from engine.server.request_log import log_request_finished
from engine.server.request_stream import RequestStream

if TYPE_CHECKING:
    from engine.server.metrics import EngineMetrics


def record_output(
    metrics: EngineMetrics | None, stream: RequestStream, output: RequestOutput, now: float
) -> None:
    timing = stream.timing
    for completion in output.outputs:
        if completion.finish_reason is not None:
            timing.finish_reasons[completion.index] = completion.finish_reason
    num_new = sum(len(c.new_token_ids) for c in output.outputs)
    if not num_new:
        return
    since_last = None if timing.last_token_time is None else now - timing.last_token_time
    if timing.first_token_time is None:
        timing.first_token_time = now
        if metrics is not None:
            metrics.observe_first_token(stream.num_prompt_tokens, now - timing.arrival_time)
    timing.last_token_time = now
    timing.num_generated_tokens += num_new
    if metrics is not None:
        metrics.observe_new_tokens(num_new, since_last)


def record_finished(
    metrics: EngineMetrics | None,
    stream: RequestStream,
    output: RequestOutput,
    now: float,
    log_prompts: bool,
) -> None:
    log_request_finished(stream, now, log_prompts)
    if metrics is None:
        return
    from engine.server.metrics import FinishedRequest

    scheduled = None if output.metrics is None else output.metrics.first_scheduled_time
    queue_s = None if scheduled is None else scheduled - stream.timing.arrival_time
    reason = output.outputs[0].finish_reason if output.outputs else None
    metrics.observe_finished(
        FinishedRequest(reason or "abort", now - stream.timing.arrival_time, queue_s)
    )
