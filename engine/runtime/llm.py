"""The offline API, as vLLM users know it: LLM(model=...).generate(prompts, sampling_params), and
.embed(prompts, pooling_params) for embeddings."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, cast

from engine.config import DEFAULT_MODEL, EngineConfig
from engine.core.scheduler_stats import SchedulerStats
from engine.inputs.engine_request import AdapterRef
from engine.inputs.pooling_params import PoolingParams
from engine.inputs.sampling_params import RequestOutputKind, SamplingParams
from engine.runtime.llm_engine import LLMEngine
from engine.runtime.outputs import EmbeddingRequestOutput, RequestOutput

Prompt = str | list[int]


class LLM:
    def __init__(self, model: str = DEFAULT_MODEL, **engine_args: Any) -> None:
        # Offline, nobody waits between tokens: steps may take the whole token budget (vLLM's
        # offline LLM likewise schedules for throughput, its server for latency).
        engine_args.setdefault("max_step_ms", 0.0)
        self.engine = LLMEngine(EngineConfig(model=model, **engine_args))
        self._ids = itertools.count()

    def generate(
        self,
        prompts: Prompt | Sequence[Prompt],
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
        use_tqdm: bool = True,
        lora_request: AdapterRef | Sequence[AdapterRef | None] | None = None,
    ) -> list[RequestOutput]:
        """Generate for every prompt (text or token ids); one output per prompt, in order.
        `lora_request`: the LoRA adapter of every prompt, or one per prompt (None: the base
        model); an AdapterRef, or vLLM's LoRARequest (docs/lora.md).

        Each request runs as FINAL_ONLY, whatever its params say: the engine hands back one whole
        output per request when it finishes, and copies nothing per step."""
        prompt_list = _as_prompt_list(prompts)
        params = _as_params_list(sampling_params, len(prompt_list))
        adapters = _as_adapter_list(lora_request, len(prompt_list))
        request_ids = [f"offline-{next(self._ids)}" for _ in prompt_list]
        for p in params:  # start every compilation now, in parallel; add_request waits for each
            if p.structured_outputs is not None:
                self.engine.guided.submit(p.structured_outputs)
        for request_id, prompt, p, adapter in zip(
            request_ids, prompt_list, params, adapters, strict=True
        ):
            final_only = replace(p, output_kind=RequestOutputKind.FINAL_ONLY)
            self.engine.add_request(request_id, prompt, final_only, lora_request=adapter)
        return self._run(request_ids, use_tqdm)

    def embed(
        self,
        prompts: Prompt | Sequence[Prompt],
        pooling_params: PoolingParams | Sequence[PoolingParams] | None = None,
        *,
        truncate_prompt_tokens: int | None = None,
        use_tqdm: bool = True,
        lora_request: AdapterRef | Sequence[AdapterRef | None] | None = None,
    ) -> list[EmbeddingRequestOutput]:
        """vLLM's: the embedding of every prompt (text or token ids), one per prompt, in order:
        the model's final hidden states pooled as `pooling_params` say (the model's default
        where they say nothing: engine/inputs/pooling_params.py). The prompts run batched like
        generate's; `truncate_prompt_tokens` applies to every prompt. A failed prompt raises
        RuntimeError."""
        prompt_list = _as_prompt_list(prompts)
        params = _as_pooling_list(pooling_params, len(prompt_list))
        if truncate_prompt_tokens is not None:
            params = [replace(p, truncate_prompt_tokens=truncate_prompt_tokens) for p in params]
        adapters = _as_adapter_list(lora_request, len(prompt_list))
        request_ids = [f"offline-{next(self._ids)}" for _ in prompt_list]
        for request_id, prompt, p, adapter in zip(
            request_ids, prompt_list, params, adapters, strict=True
        ):
            processor = self.engine.input_processor
            request = processor.process_pooling(request_id, prompt, p, lora_request=adapter)
            self.engine.output_processor.add_request(self.engine.add_engine_request(request))
        return [EmbeddingRequestOutput.of(o) for o in self._run(request_ids, use_tqdm)]

    def chat(
        self,
        messages: list[dict[str, Any]] | list[list[dict[str, Any]]],
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
        use_tqdm: bool = True,
        tools: list[dict[str, Any]] | None = None,
        lora_request: AdapterRef | Sequence[AdapterRef | None] | None = None,
    ) -> list[RequestOutput]:
        """Apply the model's chat template to each conversation (with `tools`, OpenAI tool
        objects, rendered by the template), then generate.

        Messages render exactly as the server's /v1/chat/completions renders them (one renderer,
        pagedock/text/prompt_renderer.py), so the same chat gets the same tokens offline and online.
        As in vLLM, the outputs are text: read tool calls out of it with
        `engine.tool_calls.parse_tool_calls` (docs/tool-calling.md).
        """
        from pagedock.text.prompt_renderer import read_conversation, render_chat

        one = bool(messages) and isinstance(messages[0], dict)
        conversations = cast(list[list[dict[str, Any]]], [messages] if one else messages)
        prompts: list[Prompt] = [
            render_chat(self.engine.tokenizer, read_conversation(conv, tools=tools)).token_ids
            for conv in conversations
        ]
        return self.generate(prompts, sampling_params, use_tqdm, lora_request=lora_request)

    def stats(self) -> SchedulerStats:
        return self.engine.stats()

    def reset_prefix_cache(self) -> bool:
        """Forget every cached prefix block (as vLLM's). Returns False, changing nothing, while
        any request holds KV blocks; between `generate` calls none does, so it resets."""
        return self.engine.reset_prefix_cache()

    def shutdown(self) -> None:
        """Stop the tensor-parallel worker processes now (otherwise: at interpreter exit)."""
        self.engine.shutdown()

    def _run(self, request_ids: list[str], use_tqdm: bool) -> list[RequestOutput]:
        finished: dict[str, RequestOutput] = {}
        bar = _progress_bar(len(request_ids)) if use_tqdm else None
        while self.engine.has_unfinished_requests():
            for output in self.engine.step():  # FINAL_ONLY: finished outputs only
                finished[output.request_id] = output
                if bar is not None:
                    bar.update(1)
        if bar is not None:
            bar.close()
        return [finished[r] for r in request_ids]


def _as_prompt_list(prompts: Prompt | Sequence[Prompt]) -> list[Prompt]:
    if isinstance(prompts, str):
        return [prompts]
    items = list(prompts)
    if items and all(isinstance(t, int) for t in items):
        return [items]  # type: ignore[list-item]  # a single prompt of token ids
    return items  # type: ignore[return-value]


def _as_params_list(
    params: SamplingParams | Sequence[SamplingParams] | None, count: int
) -> list[SamplingParams]:
    if params is None:
        return [SamplingParams() for _ in range(count)]
    if isinstance(params, SamplingParams):
        return [params] * count
    if len(params) != count:
        raise ValueError(f"{len(params)} sampling params for {count} prompts")
    return list(params)


def _as_pooling_list(
    params: PoolingParams | Sequence[PoolingParams] | None, count: int
) -> list[PoolingParams]:
    if params is None:
        return [PoolingParams()] * count
    if isinstance(params, PoolingParams):
        return [params] * count
    if len(params) != count:
        raise ValueError(f"{len(params)} pooling params for {count} prompts")
    return list(params)


def _as_adapter_list(
    lora_request: AdapterRef | Sequence[AdapterRef | None] | None, count: int
) -> list[AdapterRef | None]:
    if lora_request is None or isinstance(lora_request, AdapterRef):
        return [lora_request] * count
    if len(lora_request) != count:
        raise ValueError(f"{len(lora_request)} LoRA requests for {count} prompts")
    return list(lora_request)


def _progress_bar(total: int) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, desc="Generating", unit="req", dynamic_ncols=True)
