"""LLMEngine: requests in, one scheduling + forward step at a time, outputs out."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from engine.config import EngineConfig
from engine.core.kv_events import KVEventLog, KVSnapshot
from engine.core.request import Request, RequestStatus, RequestTiming
from engine.core.scheduler import Scheduler
from engine.core.scheduler_output import EngineCoreOutput, ModelRunnerOutput, SchedulerOutput
from engine.core.scheduler_stats import KVOccupancy, SchedulerStats, kv_occupancy, scheduler_stats
from engine.core.step_interrupt import StepInterrupted, StepInterrupter
from engine.device import pick_device, pick_dtype
from engine.executor.tp_executor import TPExecutor
from engine.executor.tp_worker import threads_per_rank
from engine.inputs.engine_request import AdapterRef, EngineRequest
from engine.inputs.input_processor import InputProcessor
from engine.inputs.pooler_config import read_pooler_config
from engine.inputs.sampling_params import SamplingParams
from engine.loader.model_loader import read_model_config
from engine.lora.adapter_config import check_adapter_names
from engine.lora.adapter_registry import ServedAdapter
from engine.models.tp_layout import check_tp_layout
from engine.runtime.lora_adapters import LoRAAdapters
from engine.runtime.output_processor import NewRequest, OutputProcessor
from engine.runtime.outputs import RequestOutput
from engine.runtime.weights_identity import hash_root_name
from engine.sampling.parallel_sampling import ParallelSampling, child_requests
from engine.structured_outputs.guided_decoding import GuidedDecoding
from engine.worker.host_memory import keep_freed_memory
from engine.worker.rank_builder import build_runner
from pagedock.errors import InvalidRequestError
from pagedock.kv.block_hash import root_hash
from pagedock.models.registry import resolve_model
from pagedock.text.chat_template import chat_template_source
from pagedock.text.tokenizer import load_tokenizer

logger = logging.getLogger("pagedock.engine")


class LLMEngine:
    """Not thread-safe. Each public call comes in two halves: the engine half
    (`add_engine_request`, `step_core`, `abort_core_request`, `finish_stopped`: scheduler and
    model, token ids only) and the output half (`output_processor`: text, stop strings,
    RequestOutputs). `add_request`, `step` and `abort_request` run both inline; AsyncEngine runs
    the halves on two threads. Requests come in through `input_processor` (thread-safe), the one
    place they are checked."""

    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.device = pick_device(config.device)
        self.dtype = pick_dtype(config.dtype, self.device)
        if self.device.type == "cpu":
            torch.set_num_threads(threads_per_rank(config))
            keep_freed_memory()
        self.model_path, self.served_model_name, chat_template = _resolve_model(config)
        check_adapter_names(list(config.lora_paths()), self.served_model_name)
        self.model_config = read_model_config(self.model_path)
        self.max_model_len = config.resolve_max_model_len(self.model_config.max_position_embeddings)
        check_tp_layout(self.model_config, config.tensor_parallel_size)
        self.tp_executor: TPExecutor | None = None
        if config.tensor_parallel_size > 1:
            self.tp_executor = TPExecutor(
                config, self.model_path, self.max_model_len, self.dtype, self.device
            )
        try:
            self._build_model()
        except BaseException:
            self.shutdown()  # no worker outlives a failed start
            raise
        self.tokenizer = load_tokenizer(self.model_path, chat_template)
        self.eos_token_ids = self._eos_token_ids()
        self.root_hash = root_hash(
            hash_root_name(self.model_path, self.dtype, self.runner.kv_cache_dtype)
        )
        self.scheduler = Scheduler(config, self.num_kv_blocks, self.max_model_len, self.root_hash)
        self.loras = LoRAAdapters(
            config,
            self.served_model_name,
            self.model_config,
            self.dtype,
            self.runner.lora,
            self.scheduler,
        )
        self.input_processor = InputProcessor(
            self.tokenizer,
            self.model_config.vocab_size,
            self.max_model_len,
            self.loras.registry if config.enable_lora else None,
            read_pooler_config(self.model_path, self.model_config.hidden_size),
        )
        self.guided = GuidedDecoding(
            self.tokenizer, self.model_config.vocab_size, self.eos_token_ids, config
        )
        self.output_processor = OutputProcessor(self.tokenizer)
        self.parallel = ParallelSampling()
        self.kv_events = KVEventLog()

    def _build_model(self) -> None:
        """Rank 0's model, KV cache and runner (each worker rank builds the same, in step)."""
        tp = self.tp_executor
        self.runner = build_runner(
            self.config,
            self.model_path,
            self.model_config,
            self.max_model_len,
            self.dtype,
            self.device,
            tp=None if tp is None else tp.group,
            send_step=None if tp is None else tp.send_step,
        )
        self.model = self.runner.model
        self.num_kv_blocks = self.runner.num_kv_blocks
        # Never under tensor parallelism: the ranks would have to agree where to stop.
        self.step_interrupter = StepInterrupter(self.config.interrupt_steps and tp is None)
        self.runner.step_interrupter = self.step_interrupter
        if tp is not None:
            tp.wait_ready()

    # ---- configuration ---------------------------------------------------------------------

    def _eos_token_ids(self) -> list[int]:
        ids = set(self.model_config.eos_token_ids)
        if self.tokenizer is not None:
            ids |= set(self.tokenizer.eos_token_ids)
        return sorted(ids)

    # ---- requests ----------------------------------------------------------------------------

    def add_request(
        self,
        request_id: str,
        prompt: str | Sequence[int],
        params: SamplingParams | None = None,
        priority: int = 0,
        arrival_time: float | None = None,
        *,
        lora_request: AdapterRef | None = None,
        cache_salt: str | None = None,
    ) -> None:
        """Queue a request (text or token ids; `cache_salt`: vLLM's); its outputs come from
        `step()`. The input processor checks it first: InvalidRequestError, PromptTooLongError."""
        request = self.input_processor.process(
            request_id,
            prompt,
            params,
            priority=priority,
            arrival_time=arrival_time,
            lora_request=lora_request,
            cache_salt=cache_salt,
        )
        self.output_processor.add_request(self.add_engine_request(request))

    def add_engine_request(self, request: EngineRequest) -> NewRequest:
        """The engine half of `add_request`: queue a request the input processor made (n > 1
        fans out) and return what the output path needs first. InvalidRequestError for an id in
        use, a constraint that does not compile, or a continuation its constraint rejects."""
        request_id = request.request_id
        if self.scheduler.has_request(request_id) or self.parallel.is_parent(request_id):
            raise InvalidRequestError(f"request id {request_id!r} is already in use")
        self.input_processor.check_adapter(request.lora_request)  # unloaded since it was made?
        params = request.sampling_params
        compiled = self.guided.compiled(params.structured_outputs, request.grammar)
        timing = RequestTiming(request.arrival_time, grammar_compile=request.grammar_compile)
        if params.n == 1:
            prior = request.prior_output_token_ids
            self.guided.register(self.runner, [request_id], compiled, params.stop_token_ids, prior)
            self.scheduler.add_request(self._core_request(request, timing))
            return NewRequest.of(request, timing, [request_id])
        children = [self._core_request(c, timing) for c in child_requests(request)]
        child_ids = [c.request_id for c in children]
        self.guided.register(self.runner, child_ids, compiled, params.stop_token_ids)
        defer = self.config.enable_prefix_caching or params.prompt_logprobs is not None
        for child in self.parallel.register(request_id, children, defer):
            self.scheduler.add_request(child)
        return NewRequest.of(request, timing, child_ids)

    def _core_request(self, request: EngineRequest, timing: RequestTiming) -> Request:
        core = Request.from_engine_request(request, self.eos_token_ids, timing)
        if core.lora_name is not None:
            core.lora_id = self.loras.registry.lora_id(core.lora_name)
        return core

    def abort_request(self, request_id: str) -> RequestOutput | None:
        """Stop a request (all n of it) and free its blocks; its final output. UnknownRequestError
        when the id is not in flight."""
        outputs = self.process_outputs(self.abort_core_request(request_id))
        return outputs[0] if outputs else None

    def abort_core_request(self, request_id: str) -> list[EngineCoreOutput]:
        """The engine half of `abort_request`: the 'abort' core output of each completion."""
        if not self.parallel.is_parent(request_id):
            self.scheduler.finish_request(request_id, RequestStatus.FINISHED_ABORTED)
            self.guided.release([request_id])
            self.loras.reap()
            return [EngineCoreOutput(request_id, [], "abort")]
        child_ids, pending = self.parallel.abort(request_id)
        self.guided.release(child_ids)
        for child_id in child_ids:
            if child_id not in pending:
                self.scheduler.finish_request(child_id, RequestStatus.FINISHED_ABORTED)
        self.loras.reap()
        return [EngineCoreOutput(child_id, [], "abort") for child_id in child_ids]

    def finish_stopped(self, request_ids: list[str]) -> None:
        """End the requests the output path found a stop string in, freeing their blocks (those
        that ended meanwhile on their own are skipped)."""
        self.guided.release(request_ids)
        for request_id in request_ids:
            self.parallel.child_finished(request_id)
            if self.scheduler.has_request(request_id):
                self.scheduler.finish_request(request_id, RequestStatus.FINISHED_STOPPED)
        self.loras.reap()

    def has_unfinished_requests(self) -> bool:
        return self.scheduler.has_unfinished_requests()

    # ---- LoRA adapters at run time (engine/runtime/lora_adapters.py) ---------------------------

    def add_lora(self, lora_request: AdapterRef) -> bool:
        """Load and serve an adapter (vLLM's); False when it was already served from that path.
        The start's errors (ModelLoadError, ConfigError), or InvalidRequestError."""
        return self.loras.add(lora_request)

    def remove_lora(self, name: str | int) -> bool:
        """Stop serving an adapter, by name or id (vLLM's); its requests in flight finish first.
        UnknownAdapterError when it is not served."""
        self.loras.remove(name)
        return True

    def list_loras(self) -> list[ServedAdapter]:
        """The served adapters (name, lora_id, path), in load order."""
        return self.loras.served()

    # ---- one step ----------------------------------------------------------------------------

    def step(self) -> list[RequestOutput]:
        """One step, its outputs processed here and now (the offline path)."""
        return self.process_outputs(self.step_core())

    def step_core(self) -> list[EngineCoreOutput]:
        """The engine half of a step: schedule, run the model, advance the requests, publish the
        KV events; children of n > 1 waiting for their sibling's prompt blocks join here. Token
        ids, finish reasons and logprobs only: no text."""
        started, started_at = time.perf_counter(), time.monotonic()
        scheduler_output = self.scheduler.schedule()
        try:
            runner_output = self._execute(scheduler_output)
        except StepInterrupted:  # nothing of it counts (engine/core/step_interrupt.py)
            return []
        self.scheduler.record_prefill_chunks(scheduler_output, started_at, time.monotonic())
        core_outputs = self.scheduler.update(scheduler_output, runner_output)
        self.scheduler.observe_step(scheduler_output, time.perf_counter() - started)
        self.kv_events.publish(self.scheduler.take_kv_events())
        released, failed = self.parallel.on_core_outputs(core_outputs)
        for child in released:
            self.scheduler.add_request(child)
        for parent_id in failed:
            core_outputs += self.abort_core_request(parent_id)
        self.guided.release(o.request_id for o in core_outputs if o.finish_reason is not None)
        self.guided.release_unless(self.scheduler.has_request, self.parallel.is_unfinished_child)
        self.loras.reap()  # an unloaded adapter's last request may have finished
        return core_outputs

    def process_outputs(self, core_outputs: list[EngineCoreOutput]) -> list[RequestOutput]:
        """The output half, inline: detokenize, apply stop strings, finish what they stopped."""
        processed = self.output_processor.process(core_outputs)
        self.finish_stopped(processed.stopped_by_string)
        return processed.outputs

    def _execute(self, scheduler_output: SchedulerOutput) -> ModelRunnerOutput:
        """Run the step; a failure fails the step's requests, never the engine. StepInterrupted:
        a newcomer cut it short."""
        self.step_interrupter.begin(scheduler_output, self.scheduler)
        try:
            return self.runner.execute(scheduler_output)
        except StepInterrupted:
            raise
        except Exception as e:
            if self.tp_executor is not None:  # the ranks are out of step: nothing can run now
                raise self.tp_executor.failure(e) from e
            logger.exception(
                "step failed; failing its %d requests", len(scheduler_output.scheduled)
            )
            message = f"internal error while computing this request: {type(e).__name__}: {e}"
            return ModelRunnerOutput(
                {}, {s.request_id: message for s in scheduler_output.scheduled}
            )
        finally:
            self.step_interrupter.end()

    # ---- tensor parallelism ------------------------------------------------------------------

    def check_workers(self) -> None:
        """TensorParallelError once a tensor-parallel rank has died (the engine loop asks between
        steps, so an idle engine notices too); nothing to check without tensor parallelism."""
        if self.tp_executor is not None:
            self.tp_executor.check()

    def shutdown(self) -> None:
        """Stop the tensor-parallel worker processes (also done at interpreter exit)."""
        if self.tp_executor is not None:
            self.tp_executor.close()
            self.tp_executor = None

    def tp_stats(self) -> dict[str, int]:
        """Rank 0's collectives and step traffic since start (zeros without tensor parallelism)."""
        return {"tensor_parallel_size": 1} if self.tp_executor is None else self.tp_executor.stats()

    # ---- what callers may know ---------------------------------------------------------------

    def stats(self) -> SchedulerStats:
        stats = scheduler_stats(self.scheduler)
        stats.num_grammar_states = self.guided.num_live
        stats.num_interrupted_steps = self.step_interrupter.num_interrupted
        return stats

    def kv_occupancy(self) -> KVOccupancy:
        """What the running requests hold in the KV cache now (benchmarks sample it per step)."""
        sched = self.scheduler
        return kv_occupancy(sched.running, sched.kv_cache_manager, sched.block_size)

    def reset_prefix_cache(self) -> bool:
        """Forget every cached prefix block (an AllBlocksCleared event tells the router). Refuses,
        returning False, while any request holds KV blocks: running requests are never touched."""
        reset = self.scheduler.reset_prefix_cache()
        self.kv_events.publish(self.scheduler.take_kv_events())
        return reset

    def kv_snapshot(self) -> KVSnapshot:
        """Every cached block hash and the seq of the last event batch it includes."""
        # NOTE: events recorded since the last step (none today; aborts only free blocks) are
        # published first, so the snapshot never runs ahead of `seq`.
        self.kv_events.publish(self.scheduler.take_kv_events())
        hashes = self.scheduler.cached_block_hashes()
        return KVSnapshot(self.kv_events.last_seq, self.config.block_size, hashes)


def _resolve_model(config: EngineConfig) -> tuple[Path, str, str | None]:
    resolved = resolve_model(config.model)  # a bad --chat-template fails next, before the weights
    template = chat_template_source(config.chat_template, resolved.chat_template_file)
    return resolved.path, config.served_model_name or resolved.name, template
