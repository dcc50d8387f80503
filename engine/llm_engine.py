"""LLMEngine: requests in, one scheduling + forward step at a time, outputs out."""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from engine.attention.backend import get_attention_backend
from engine.config import DEFAULT_CPU_KV_CACHE_MEMORY, EngineConfig
from engine.core.block_hash import root_hash
from engine.core.kv_events import KVEventLog
from engine.core.request import Request, RequestStatus
from engine.core.scheduler import Scheduler
from engine.core.scheduler_output import ModelRunnerOutput, SchedulerOutput
from engine.errors import InvalidRequestError, PromptTooLongError
from engine.loader.model_loader import load_model, read_model_config
from engine.loader.registry import resolve_model
from engine.output_processor import OutputProcessor
from engine.outputs import RequestOutput
from engine.parallel_sampling import ParallelSampling, child_params, child_request_id
from engine.sampling_params import SamplingParams
from engine.text.tokenizer import Tokenizer
from engine.worker.model_runner import ModelRunner, kv_cache_bytes_per_block

logger = logging.getLogger("pagedock.engine")

_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclass
class EngineStats:
    num_running: int
    num_waiting: int
    kv_cache_usage: float
    prefix_cache_queries: int
    prefix_cache_hits: int
    prefix_cache_hit_rate: float
    kv_utilisation: float
    naive_kv_utilisation: float
    num_preemptions: int
    num_steps: int
    num_kv_blocks: int
    num_free_kv_blocks: int


class LLMEngine:
    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.device = _pick_device(config.device)
        self.dtype = _pick_dtype(config.dtype, self.device)
        if self.device.type == "cpu":
            torch.set_num_threads(config.num_threads or len(os.sched_getaffinity(0)))
        self.model_path, self.served_model_name = _resolve_model(config)
        self.model_config = read_model_config(self.model_path)
        self.max_model_len = self._pick_max_model_len()
        self._check_batching_limits()
        backend = get_attention_backend(self.device, config.attention_backend)
        self.model = load_model(
            self.model_path, self.model_config, self.dtype, self.device, backend, self.max_model_len
        )
        self.num_kv_blocks = self._pick_num_kv_blocks()
        self.tokenizer = _load_tokenizer(self.model_path)
        self.eos_token_ids = self._eos_token_ids()
        self.root_hash = root_hash(f"{self.model_config.name}:{self.dtype}")
        self.scheduler = Scheduler(config, self.num_kv_blocks, self.max_model_len, self.root_hash)
        self.runner = ModelRunner(
            self.model,
            self.model_config,
            backend,
            self.num_kv_blocks,
            config.block_size,
            self.dtype,
            self.device,
            seed=config.seed,
        )
        if self.device.type == "cuda" and not config.enforce_eager:
            from engine.worker.cuda_graph_runner import CudaCapture

            self.runner.capture_decode_graphs(
                config.max_num_seqs, self.max_model_len, CudaCapture()
            )
        self.output_processor = OutputProcessor(self.tokenizer)
        self.parallel = ParallelSampling()
        self.kv_events = KVEventLog()

    # ---- configuration ---------------------------------------------------------------------

    def _pick_max_model_len(self) -> int:
        model_len = self.model_config.max_position_embeddings
        wanted = self.config.max_model_len
        if wanted is None:
            return model_len
        if wanted > model_len:
            raise InvalidRequestError(
                f"max_model_len {wanted} exceeds the model's context length {model_len}"
            )
        return wanted

    def _check_batching_limits(self) -> None:
        if (
            not self.config.enable_chunked_prefill
            and self.config.max_num_batched_tokens < self.max_model_len
        ):
            raise InvalidRequestError(
                f"with chunked prefill off, max_num_batched_tokens ({self.config.max_num_batched_tokens}) "
                f"must be at least max_model_len ({self.max_model_len}), or a long prompt could "
                "never be scheduled; raise it, lower max_model_len, or enable chunked prefill"
            )

    def _pick_num_kv_blocks(self) -> int:
        bs = self.config.block_size
        num_blocks = self.config.num_kv_blocks
        if num_blocks is None:
            budget = self.config.kv_cache_memory or DEFAULT_CPU_KV_CACHE_MEMORY
            if self.config.kv_cache_memory is None and self.device.type == "cuda":
                free, _ = torch.cuda.mem_get_info(self.device)
                budget = int(free * 0.9)
            assert isinstance(budget, int)
            per_block = kv_cache_bytes_per_block(self.model_config, bs, self.dtype)
            num_blocks = budget // per_block
            # No point holding more than max_num_seqs full-length sequences.
            num_blocks = min(
                num_blocks, self.config.max_num_seqs * -(-self.max_model_len // bs) + 1
            )
        needed = -(-self.max_model_len // bs)
        if num_blocks < needed:
            raise InvalidRequestError(
                f"the KV cache holds {num_blocks} blocks of {bs} tokens ({num_blocks * bs} tokens), "
                f"fewer than one sequence of max_model_len {self.max_model_len} needs ({needed} "
                "blocks); lower max_model_len or give the cache more memory"
            )
        return num_blocks

    def _eos_token_ids(self) -> list[int]:
        ids = set(self.model_config.eos_token_ids)
        if self.tokenizer is not None:
            ids |= set(self.tokenizer.eos_token_ids)
        return sorted(ids)

    # ---- requests ----------------------------------------------------------------------------

    def add_request(
        self,
        request_id: str,
        prompt: str | list[int],
        params: SamplingParams | None = None,
        priority: int = 0,
        arrival_time: float | None = None,
    ) -> None:
        params = params or SamplingParams()
        if request_id in self.scheduler.requests or self.parallel.is_parent(request_id):
            raise InvalidRequestError(f"request id {request_id!r} is already in use")
        text, token_ids = self._tokenize(prompt)
        max_tokens = self._check_length(len(token_ids), params)
        if params.stop and self.tokenizer is None:
            raise InvalidRequestError("stop strings need a tokenizer; this model has none", "stop")
        arrival_time = time.monotonic() if arrival_time is None else arrival_time
        if params.n == 1:
            self._enqueue(
                Request(
                    request_id,
                    token_ids,
                    params,
                    max_tokens,
                    self.eos_token_ids,
                    priority,
                    arrival_time,
                ),
                text,
            )
            return
        children = [
            Request(
                child_request_id(request_id, i),
                token_ids,
                child_params(params, i),
                max_tokens,
                self.eos_token_ids,
                priority,
                arrival_time,
            )
            for i in range(params.n)
        ]
        defer = self.config.enable_prefix_caching
        for child in self.parallel.register(request_id, text, children, defer):
            self._enqueue(child, text)

    def _enqueue(self, request: Request, text: str | None) -> None:
        self.scheduler.add_request(request)
        self.output_processor.add_request(
            request.request_id,
            text,
            request.prompt_token_ids,
            request.sampling_params,
            request.arrival_time,
        )

    def _tokenize(self, prompt: str | list[int]) -> tuple[str | None, list[int]]:
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise InvalidRequestError("this model has no tokenizer: pass token ids", "prompt")
            if not prompt:
                raise InvalidRequestError("the prompt is empty", "prompt")
            return prompt, self.tokenizer.encode(prompt)
        token_ids = list(prompt)
        if not token_ids:
            raise InvalidRequestError("the prompt is empty", "prompt")
        vocab = self.model_config.vocab_size
        bad = [t for t in token_ids if not isinstance(t, int) or not 0 <= t < vocab]
        if bad:
            raise InvalidRequestError(
                f"token ids must be integers in [0, {vocab}); got {bad[:5]}", "prompt"
            )
        return None, token_ids

    def _check_length(self, num_prompt_tokens: int, params: SamplingParams) -> int:
        """The resolved max_tokens; PromptTooLongError when prompt + max_tokens can't fit."""
        limit = self.max_model_len
        if num_prompt_tokens >= limit:
            raise PromptTooLongError(
                f"the prompt has {num_prompt_tokens} tokens; this model's maximum context length "
                f"is {limit} tokens, leaving no room to generate",
                "prompt",
            )
        if params.max_tokens is None:
            return limit - num_prompt_tokens
        if num_prompt_tokens + params.max_tokens > limit:
            raise PromptTooLongError(
                f"this model's maximum context length is {limit} tokens, but "
                f"{num_prompt_tokens + params.max_tokens} were requested "
                f"({num_prompt_tokens} in the prompt, {params.max_tokens} to generate)",
                "max_tokens",
            )
        return params.max_tokens

    def abort_request(self, request_id: str) -> RequestOutput | None:
        """Stop a request (all n of it) and free its blocks. UnknownRequestError when the id is
        not in flight."""
        if not self.parallel.is_parent(request_id):
            self.scheduler.finish_request(request_id, RequestStatus.FINISHED_ABORTED)
            return self.output_processor.abort(request_id)
        child_ids, _ = self.parallel.children_to_abort(request_id)
        outputs = []
        for child_id in child_ids:
            self.scheduler.finish_request(child_id, RequestStatus.FINISHED_ABORTED)
            output = self.output_processor.abort(child_id)
            if output is not None:
                outputs.append(output)
        completions = [c for o in outputs for c in o.outputs]
        if not outputs:
            return None
        return RequestOutput(
            request_id, outputs[0].prompt, outputs[0].prompt_token_ids, completions, True
        )

    def has_unfinished_requests(self) -> bool:
        return self.scheduler.has_unfinished_requests()

    # ---- one step ----------------------------------------------------------------------------

    def step(self) -> list[RequestOutput]:
        scheduler_output = self.scheduler.schedule()
        runner_output = self._execute(scheduler_output)
        core_outputs = self.scheduler.update(scheduler_output, runner_output)
        processed = self.output_processor.process(core_outputs)
        for request_id in processed.stopped_by_string:
            self.scheduler.finish_request(request_id, RequestStatus.FINISHED_STOPPED)
        self.kv_events.publish(self.scheduler.kv_cache_manager.pool.take_events())
        outputs, released = self.parallel.merge(processed.outputs)
        for child in released:
            self._enqueue(child, self._prompt_of(child))
        return outputs

    def _prompt_of(self, child: Request) -> str | None:
        entry = self.parallel.child_to_parent.get(child.request_id)
        return entry[0].prompt if entry else None

    def _execute(self, scheduler_output: SchedulerOutput) -> ModelRunnerOutput:
        """Run the step; a failure fails the step's requests, never the engine."""
        try:
            return self.runner.execute(scheduler_output)
        except Exception as e:
            logger.exception(
                "step failed; failing its %d requests", len(scheduler_output.scheduled)
            )
            message = f"internal error while computing this request: {type(e).__name__}: {e}"
            return ModelRunnerOutput(
                {}, {s.request_id: message for s in scheduler_output.scheduled}
            )

    def stats(self) -> EngineStats:
        sched = self.scheduler
        kv = sched.kv_cache_manager
        prefix = kv.prefix_cache_stats
        return EngineStats(
            num_running=len(sched.running),
            num_waiting=len(sched.waiting),
            kv_cache_usage=kv.usage,
            prefix_cache_queries=prefix.queries,
            prefix_cache_hits=prefix.hits,
            prefix_cache_hit_rate=prefix.hit_rate,
            kv_utilisation=sched.stats.kv_utilisation,
            naive_kv_utilisation=sched.stats.naive_kv_utilisation,
            num_preemptions=sched.stats.num_preemptions,
            num_steps=sched.stats.num_steps,
            num_kv_blocks=self.num_kv_blocks,
            num_free_kv_blocks=kv.pool.num_free_blocks,
        )


def _pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise InvalidRequestError("device 'cuda' was asked for, but no CUDA device is available")
    return torch.device(name)


def _pick_dtype(name: str, device: torch.device) -> torch.dtype:
    if name == "auto":
        # bf16 is 2-5x slower than fp32 on CPUs without AMX; GPUs want bf16.
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return _DTYPES[name]


def _resolve_model(config: EngineConfig) -> tuple[Path, str]:
    resolved = resolve_model(config.model)
    return resolved.path, config.served_model_name or resolved.name


def _load_tokenizer(path: Path) -> Tokenizer | None:
    """The GGUF's own tokenizer, or the HF directory's tokenizer.json; None for a bare checkpoint
    (such a model takes token ids only)."""
    if path.suffix == ".gguf":
        return Tokenizer.from_gguf(path)
    if (path / "tokenizer.json").exists():
        return Tokenizer.from_hf_dir(path)
    return None
