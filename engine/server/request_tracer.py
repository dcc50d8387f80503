"""RequestTracer: each finished request as OpenTelemetry spans (tracing on: pagedock/tracing/).

    llm_request            arrival -> finish; vLLM's gen_ai.* attributes, the model, adapter,
      queue                tenant and priority; status ERROR when it was aborted or failed
      prefill              arrival -> first scheduled -> first token -> finish
        prefill_chunk      each step that computed part of the prompt, with its tokens
      decode
      structured_output_compile    the wait for its constraint's grammar, when it had one

Made when the request finishes, from the times the engine recorded (RequestTiming), with the
HTTP request's W3C `traceparent` (remembered by its generation) as the parent: the router's
span when it came through one. An output listener of the async engine, like the request log.
"""

from __future__ import annotations

from typing import Any

from engine.runtime.outputs import FinishedRequestStats, IterationStats
from pagedock.request_ids import remembered
from pagedock.tracing.tracer import clock_pair, parent_context, wall_ns

ERROR_REASONS = frozenset({"abort", "error"})


class RequestTracer:
    def __init__(self, tracer: Any, model: str) -> None:
        self.tracer = tracer
        self.model = model

    def on_outputs(self, stats: IterationStats) -> None:
        if stats.finished:
            now = clock_pair()
            for finished in stats.finished:
                self._trace(finished, now)

    def _trace(self, finished: FinishedRequestStats, now: tuple[float, int]) -> None:
        from opentelemetry.trace import SpanKind, Status, StatusCode, set_span_in_context

        timing = finished.timing
        end = timing.finished_time or timing.arrival_time
        ids = remembered(finished.request_id.split("-", 1)[0])
        parent = parent_context(None if ids is None else ids.traceparent)
        span = self.tracer.start_span(
            "llm_request",
            context=parent,
            kind=SpanKind.SERVER,
            start_time=wall_ns(timing.arrival_time, *now),
            attributes=self._attributes(finished),
        )
        reasons = set(finished.finish_reasons)
        if reasons & ERROR_REASONS:
            span.set_status(Status(StatusCode.ERROR, ",".join(sorted(reasons))))
        self._phases(set_span_in_context(span), finished, now)
        span.end(end_time=wall_ns(end, *now))

    def _phases(self, inside: Any, finished: FinishedRequestStats, now: tuple[float, int]) -> None:
        """queue, prefill (with a span per chunk) and decode, tiling the request's span; the
        wait for a structured-outputs grammar beside them."""
        from opentelemetry.trace import set_span_in_context

        timing = finished.timing
        if timing.grammar_compile is not None:
            began, ended = (wall_ns(t, *now) for t in timing.grammar_compile)
            compiling = self.tracer.start_span(
                "structured_output_compile", context=inside, start_time=began
            )
            compiling.end(end_time=ended)
        end = timing.finished_time or timing.arrival_time
        phases = [timing.arrival_time, timing.first_scheduled_time, timing.first_token_time, end]
        names = ("queue", "prefill", "decode")
        for name, start, stop in zip(names, phases, phases[1:], strict=False):
            if start is None or stop is None:
                continue
            child = self.tracer.start_span(name, context=inside, start_time=wall_ns(start, *now))
            if name == "prefill":
                self._chunks(set_span_in_context(child), timing.prefill_chunks, now)
            child.end(end_time=wall_ns(stop, *now))

    def _chunks(
        self, prefill: Any, chunks: list[tuple[float, float, int]], now: tuple[float, int]
    ) -> None:
        """A span per step that computed part of the prompt (a preemption's recomputation
        too), with how many tokens it computed."""
        for start, stop, tokens in chunks:
            chunk = self.tracer.start_span(
                "prefill_chunk",
                context=prefill,
                start_time=wall_ns(start, *now),
                attributes={"pagedock.num_tokens": tokens},
            )
            chunk.end(end_time=wall_ns(stop, *now))

    def _attributes(self, finished: FinishedRequestStats) -> dict[str, Any]:
        timing = finished.timing
        end = timing.finished_time or timing.arrival_time
        attributes: dict[str, Any] = {
            "gen_ai.request.id": finished.request_id,
            "gen_ai.response.model": finished.lora_name or self.model,
            "gen_ai.usage.prompt_tokens": finished.num_prompt_tokens,
            "gen_ai.usage.completion_tokens": timing.num_generated_tokens,
            "gen_ai.latency.e2e": end - timing.arrival_time,
            "gen_ai.response.finish_reasons": sorted(set(finished.finish_reasons)),
            "pagedock.model": self.model,
            "pagedock.tenant": finished.tenant,
            "pagedock.priority": finished.priority,
        }
        if finished.lora_name is not None:
            attributes["pagedock.adapter"] = finished.lora_name
        if timing.first_scheduled_time is not None:
            attributes["gen_ai.latency.time_in_queue"] = (
                timing.first_scheduled_time - timing.arrival_time
            )
        if timing.first_token_time is not None:
            attributes["gen_ai.latency.time_to_first_token"] = (
                timing.first_token_time - timing.arrival_time
            )
        return attributes
