"""LLMEngine: requests in, one scheduling + forward step at a time, outputs out."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from engine.attention.backend import get_attention_backend
from engine.config import DEFAULT_CPU_KV_CACHE_MEMORY, EngineConfig
from engine.continuation import check_continuation
from engine.core.block_hash import root_hash
from engine.core.kv_events import KVEventLog, KVSnapshot
from engine.core.parallel_sampling import ParallelSampling, child_params, child_request_id
from engine.core.request import Request, RequestStatus, RequestTiming
from engine.core.scheduler import Scheduler
from engine.core.scheduler_output import EngineCoreOutput, ModelRunnerOutput, SchedulerOutput
from engine.core.scheduler_stats import KVOccupancy, SchedulerStats
from engine.errors import ConfigError, InvalidRequestError
from engine.kernels.cpu_kernels import set_cpu_kernels_enabled
from engine.loader.model_loader import load_model, read_model_config
from engine.loader.registry import resolve_model
from engine.output_processor import NewRequest, OutputProcessor
from engine.outputs import RequestOutput
from engine.request_checks import check_prompt_ids, check_stop_token_ids, resolve_max_tokens
from engine.sampling_params import SamplingParams
from engine.text.tokenizer import load_tokenizer
from engine.worker.model_runner import ModelRunner, kv_cache_bytes_per_block

logger = logging.getLogger("pagedock.engine")

_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


class LLMEngine:
    """Not thread-safe. Each public call comes in two halves: the engine half (`add_core_request`,
    `step_core`, `abort_core_request`, `finish_stopped`: scheduler and model, token ids only) and
    the output half (`output_processor`: text, stop strings, RequestOutputs). `add_request`,
    `step` and `abort_request` run both inline; AsyncEngine runs the halves on two threads."""

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
        set_cpu_kernels_enabled(config.cpu_kernels)  # before the backend and layers ask for them
        backend = get_attention_backend(self.device, config.attention_backend)
        self.model = load_model(
            self.model_path,
            self.model_config,
            self.dtype,
            self.device,
            backend,
            self.max_model_len,
            onednn=config.onednn,
            weight_cache=config.weight_cache,
        )
        self.num_kv_blocks = self._pick_num_kv_blocks()
        self.tokenizer = load_tokenizer(self.model_path)
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
            raise ConfigError(
                f"max_model_len {wanted} exceeds the model's context length {model_len}"
            )
        return wanted

    def _check_batching_limits(self) -> None:
        if (
            not self.config.enable_chunked_prefill
            and self.config.max_num_batched_tokens < self.max_model_len
        ):
            raise ConfigError(
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
            raise ConfigError(
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
        """Queue a request; its outputs come from `step()`."""
        new = self.add_core_request(request_id, prompt, params, priority, arrival_time)
        self.output_processor.add_request(new)

    def add_core_request(
        self,
        request_id: str,
        prompt: str | list[int],
        params: SamplingParams | None = None,
        priority: int = 0,
        arrival_time: float | None = None,
        prior_output_token_ids: Sequence[int] = (),
    ) -> NewRequest:
        """The engine half of `add_request`: validate and queue (n > 1 fans out). Returns what the
        output path must register before the request's first core output.
        `prior_output_token_ids`: a continuation's (engine/continuation.py)."""
        params = params or SamplingParams()
        if self.scheduler.has_request(request_id) or self.parallel.is_parent(request_id):
            raise InvalidRequestError(f"request id {request_id!r} is already in use")
        text, token_ids = self._tokenize(prompt)
        self._check_token_ids(params)
        max_tokens = self._check_length(len(token_ids), params)
        prior = check_continuation(
            prior_output_token_ids, params, self.model_config.vocab_size,
            room=min(max_tokens, self.max_model_len - len(token_ids)),
        )  # fmt: skip
        if params.stop and self.tokenizer is None:
            raise InvalidRequestError("stop strings need a tokenizer; this model has none", "stop")
        timing = RequestTiming(time.monotonic() if arrival_time is None else arrival_time)

        def make(child_id: str, sampling: SamplingParams) -> Request:
            eos = self.eos_token_ids
            return Request(child_id, token_ids, sampling, max_tokens, eos, priority, None, timing, prior)  # fmt: skip

        if params.n == 1:
            self.scheduler.add_request(make(request_id, params))
            return NewRequest(request_id, text, token_ids, params, timing, [request_id], prior)
        children = [
            make(child_request_id(request_id, i), child_params(params, i)) for i in range(params.n)
        ]
        defer = self.config.enable_prefix_caching
        for child in self.parallel.register(request_id, children, defer):
            self.scheduler.add_request(child)
        child_ids = [c.request_id for c in children]
        return NewRequest(request_id, text, token_ids, params, timing, child_ids)

    def _tokenize(self, prompt: str | list[int]) -> tuple[str | None, list[int]]:
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise InvalidRequestError("this model has no tokenizer: pass token ids", "prompt")
            if not prompt:
                raise InvalidRequestError("the prompt is empty", "prompt")
            return prompt, self.tokenizer.encode(prompt)
        token_ids = list(prompt)
        check_prompt_ids(token_ids, self.model_config.vocab_size)
        return None, token_ids

    def _check_token_ids(self, params: SamplingParams) -> None:
        check_stop_token_ids(params, self.model_config.vocab_size)

    def _check_length(self, num_prompt_tokens: int, params: SamplingParams) -> int:
        return resolve_max_tokens(num_prompt_tokens, params, self.max_model_len)

    def abort_request(self, request_id: str) -> RequestOutput | None:
        """Stop a request (all n of it) and free its blocks; its final output. UnknownRequestError
        when the id is not in flight."""
        outputs = self.process_outputs(self.abort_core_request(request_id))
        return outputs[0] if outputs else None

    def abort_core_request(self, request_id: str) -> list[EngineCoreOutput]:
        """The engine half of `abort_request`: the 'abort' core output of each completion."""
        if not self.parallel.is_parent(request_id):
            self.scheduler.finish_request(request_id, RequestStatus.FINISHED_ABORTED)
            return [EngineCoreOutput(request_id, [], "abort")]
        child_ids, pending = self.parallel.abort(request_id)
        for child_id in child_ids:
            if child_id not in pending:
                self.scheduler.finish_request(child_id, RequestStatus.FINISHED_ABORTED)
        return [EngineCoreOutput(child_id, [], "abort") for child_id in child_ids]

    def finish_stopped(self, request_ids: list[str]) -> None:
        """End the requests the output path found a stop string in, freeing their blocks (those
        that ended meanwhile on their own are skipped)."""
        for request_id in request_ids:
            self.parallel.child_finished(request_id)
            if self.scheduler.has_request(request_id):
                self.scheduler.finish_request(request_id, RequestStatus.FINISHED_STOPPED)

    def has_unfinished_requests(self) -> bool:
        return self.scheduler.has_unfinished_requests()

    # ---- one step ----------------------------------------------------------------------------

    def step(self) -> list[RequestOutput]:
        """One step, its outputs processed here and now (the offline path)."""
        return self.process_outputs(self.step_core())

    def step_core(self) -> list[EngineCoreOutput]:
        """The engine half of a step: schedule, run the model, advance the requests, publish the
        KV events; children of n > 1 waiting for their sibling's prompt blocks join here. Token
        ids, finish reasons and logprobs only: no text."""
        scheduler_output = self.scheduler.schedule()
        runner_output = self._execute(scheduler_output)
        core_outputs = self.scheduler.update(scheduler_output, runner_output)
        self.kv_events.publish(self.scheduler.take_kv_events())
        for child in self.parallel.on_core_outputs(core_outputs):
            self.scheduler.add_request(child)
        return core_outputs

    def process_outputs(self, core_outputs: list[EngineCoreOutput]) -> list[RequestOutput]:
        """The output half, inline: detokenize, apply stop strings, finish what they stopped."""
        processed = self.output_processor.process(core_outputs)
        self.finish_stopped(processed.stopped_by_string)
        return processed.outputs

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

    # ---- what callers may know ---------------------------------------------------------------

    def stats(self) -> SchedulerStats:
        return self.scheduler.make_stats()

    def kv_occupancy(self) -> KVOccupancy:
        """What the running requests hold in the KV cache now (benchmarks sample it per step)."""
        return self.scheduler.kv_occupancy()

    def kv_snapshot(self) -> KVSnapshot:
        """Every cached block hash and the seq of the last event batch it includes."""
        # NOTE: events recorded since the last step (none today; aborts only free blocks) are
        # published first, so the snapshot never runs ahead of `seq`.
        self.kv_events.publish(self.scheduler.take_kv_events())
        hashes = self.scheduler.cached_block_hashes()
        return KVSnapshot(self.kv_events.last_seq, self.config.block_size, hashes)


def _pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device 'cuda' was asked for, but no CUDA device is available")
    return torch.device(name)


def _pick_dtype(name: str, device: torch.device) -> torch.dtype:
    if name == "auto":
        # bf16 is 2-5x slower than fp32 on CPUs without AMX; GPUs want bf16.
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return _DTYPES[name]


def _resolve_model(config: EngineConfig) -> tuple[Path, str]:
    resolved = resolve_model(config.model)
    return resolved.path, config.served_model_name or resolved.name
