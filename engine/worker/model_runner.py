"""Runs one step on the model: builds the flat varlen batch, runs the forward pass, samples, and
pools the hidden states of embedding requests (engine/worker/pooler.py)."""

from __future__ import annotations

import logging
from collections.abc import Callable

import torch

from engine.attention.backend import AttentionBackend
from engine.attention.kv_quant import cache_head_width
from engine.core.scheduler_output import (
    LogprobsLists,
    ModelRunnerOutput,
    SampledToken,
    ScheduledRequest,
    SchedulerOutput,
)
from engine.core.step_interrupt import StepInterrupter
from engine.lora.lora_manager import LoRAManager
from engine.model_config import ModelConfig
from engine.models.llama import LlamaForCausalLM
from engine.sampling.prompt_logprobs import compute_prompt_logprobs
from engine.sampling.rejection_sampler import RejectionSampler
from engine.sampling.sampler import Sampler, SamplingTensors
from engine.sampling.sampling_batch import build_sampling_tensors
from engine.sampling.step_seed import step_seed
from engine.structured_outputs.structured_output_manager import StructuredOutputManager
from engine.worker.cuda_graph_runner import DecodeGraphRunner, GraphCapture, is_graphable
from engine.worker.huge_pages import zeroed_tensor
from engine.worker.input_batch import ModelInputs, build_model_inputs, order_decodes_first
from engine.worker.pooler import Pooler

logger = logging.getLogger("pagedock.engine")


class ModelRunner:
    def __init__(
        self,
        model: LlamaForCausalLM,
        config: ModelConfig,
        backend: AttentionBackend,
        num_kv_blocks: int,
        block_size: int,
        kv_cache_dtype: torch.dtype,
        device: torch.device,
        seed: int = 0,
        send_step: Callable[[list[ScheduledRequest]], None] | None = None,
        lora: LoRAManager | None = None,
    ) -> None:
        self.model = model
        self.config = config
        self.backend = backend
        self.block_size = block_size
        self.device = device
        self.num_kv_blocks = num_kv_blocks
        self.kv_cache_dtype = kv_cache_dtype
        # This rank's KV heads only: every rank's cache has the same blocks, fewer heads.
        self.kv_caches = allocate_kv_caches(
            config, num_kv_blocks, block_size, kv_cache_dtype, device, model.layout.num_kv_heads
        )
        # Tensor parallelism: hands each step's batch to the other ranks before rank 0 runs it.
        self.send_step = send_step
        self.sampler = Sampler(torch.Generator(device="cpu").manual_seed(seed))
        self.rejection_sampler = RejectionSampler(self.sampler.generator)
        # Per-request generators for requests with their own seed; dropped when they finish.
        self.generators: dict[str, torch.Generator] = {}
        # Guided requests' grammar states (the engine owns it; None until one is needed).
        self.structured_outputs: StructuredOutputManager | None = None
        self.graphs: DecodeGraphRunner | None = None
        # LoRA engines: the adapters' slot weights; the model's projections read its mapping.
        self.lora = lora
        # Embedding requests' pooled hidden states, summed across their prefill chunks.
        self.pooler = Pooler()
        # Set by the engine: looked at between layers of an eager step, which it may cut short.
        self.step_interrupter: StepInterrupter | None = None

    def capture_decode_graphs(
        self, max_num_seqs: int, max_model_len: int, capturer: GraphCapture
    ) -> None:
        """From now on decode-only steps replay captured graphs
        (engine/worker/cuda_graph_runner.py)."""
        with torch.inference_mode():
            self.graphs = DecodeGraphRunner(
                self.model,
                self.kv_caches,
                max_num_seqs,
                max_model_len,
                self.block_size,
                self.device,
                capturer,
            )

    @torch.inference_mode()
    def execute(self, output: SchedulerOutput) -> ModelRunnerOutput:
        for request_id in output.finished_req_ids:
            self.generators.pop(request_id, None)
        self.pooler.drop(output.finished_req_ids)
        self.pooler.drop(output.preempted_req_ids)  # a recompute pools every row again
        if output.is_empty:
            return ModelRunnerOutput({})
        batch = order_decodes_first(output.scheduled)
        if self.send_step is not None:
            self.send_step(batch)
        logits, sampling, pooled_hidden = self.forward(batch)
        # Draft rows come last (input_batch.py): prompt-logprob rows lie between them and the
        # sampling rows.
        drafts_start = logits.shape[0] - sum(len(s.draft_token_ids) for s in sampling)
        prompt_logprobs: dict[str, LogprobsLists] = {}
        if drafts_start > len(sampling):
            prompt_logprobs = compute_prompt_logprobs(logits[len(sampling) : drafts_start], batch)
        result = ModelRunnerOutput({})
        if drafts_start < logits.shape[0]:
            result = self._sample_and_verify(logits.cpu(), sampling, drafts_start)
        elif sampling:
            result = self._sample(logits[: len(sampling)].cpu(), sampling)
        result.prompt_logprobs = prompt_logprobs
        if pooled_hidden is not None or self.pooler.has_pending:
            result.pooler_output = self.pooler.pool(batch, pooled_hidden)
        return result

    def forward(
        self, batch: list[ScheduledRequest]
    ) -> tuple[torch.Tensor, list[ScheduledRequest], torch.Tensor | None]:
        """The step's logits: rows of the requests that sample, in the returned order, then the
        rows of prompt logprobs (input_batch.py); and the final hidden states of the rows
        embedding requests pool (None in a step without any). Every tensor-parallel rank runs
        this on the same batch; only rank 0's logits hold anything."""
        # NOTE: a graphable step has no prompt-logprob rows: those are never a chunk's last
        # prompt position, so a one-token chunk with one does not sample.
        if (
            self.graphs is not None
            and is_graphable(batch, self.graphs.max_size)
            and (self.lora is None or all(s.lora_slot < 0 for s in batch))
        ):  # NOTE: the graphs hold no LoRA: a step with adapter rows runs eagerly
            return self.graphs.run(batch), batch, None  # (no pooling: every row samples)
        inputs = build_model_inputs(batch, self.block_size, self.device, self.lora is not None)
        if inputs.lora_mapping is None:
            logits, pooled_hidden = self._run_model(inputs)
            return logits, inputs.sample_requests, pooled_hidden
        assert self.lora is not None
        for s in batch:
            if s.lora_name is not None:
                self.lora.activate(s.lora_slot, s.lora_name)
        with self.lora.step(inputs.lora_mapping):
            logits, pooled_hidden = self._run_model(inputs)
        return logits, inputs.sample_requests, pooled_hidden

    def _run_model(self, inputs: ModelInputs) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(logits, pooled rows' final hidden states or None). A step without pooling rows is
        the model's plain forward pass: generation pays nothing for embeddings."""
        interrupter = self.step_interrupter
        between_layers = None if interrupter is None else interrupter.check
        if inputs.pooling_indices is None:
            logits = self.model(
                inputs.input_ids,
                inputs.positions,
                self.kv_caches,
                inputs.meta,
                inputs.sample_indices,
                between_layers,
            )
            return logits, None
        # NOTE: the same layers and logits as forward() (a tensor-parallel rank, which knows no
        # pooling, runs forward(): the collectives match); only the pooled rows' norm is added.
        hidden, residual = self.model.decode_layers(
            inputs.input_ids, inputs.positions, self.kv_caches, inputs.meta, between_layers
        )
        pooled_hidden = self.model.final_hidden(hidden, residual, inputs.pooling_indices)
        return self.model.logits(hidden, residual, inputs.sample_indices), pooled_hidden

    def _sample(self, logits: torch.Tensor, sampling: list[ScheduledRequest]) -> ModelRunnerOutput:
        """Sample the step's rows in one batch; if that fails, each row alone (`_sample_each`)."""
        try:
            tokens = self.sampler(logits, self._sampling_tensors(sampling))
        except Exception:
            # Seeded rows are seeded for their position again: their tokens are a good step's.
            logger.exception("sampling %d requests together failed; each alone", len(sampling))
            return self._sample_each(logits, sampling)
        output = ModelRunnerOutput({s.request_id: t for s, t in zip(sampling, tokens, strict=True)})
        return self._advance_grammars(output)

    def _sample_and_verify(
        self, logits: torch.Tensor, sampling: list[ScheduledRequest], drafts_start: int
    ) -> ModelRunnerOutput:
        """A step with drafts: the rows without one sample as in any step; each draft is verified
        (engine/sampling/rejection_sampler.py) on its request's sampling row and draft rows."""
        plain = [i for i, s in enumerate(sampling) if not s.draft_token_ids]
        result = ModelRunnerOutput({})
        if plain:
            result = self._sample(logits[plain], [sampling[i] for i in plain])
        speculating = [s for s in sampling if s.draft_token_ids]
        rows: list[int] = []
        for index, s in enumerate(sampling):
            if s.draft_token_ids:
                rows += [index, *range(drafts_start, drafts_start + len(s.draft_token_ids))]
                drafts_start += len(s.draft_token_ids)
        drafts = [s.draft_token_ids for s in speculating]
        try:
            verified = self.rejection_sampler(
                logits[rows], drafts, [s.sampling_params for s in speculating]
            )
        except Exception as e:
            logger.exception("verifying %d drafts failed", len(speculating))
            for s in speculating:
                result.errors[s.request_id] = (
                    f"internal error while verifying its draft: {type(e).__name__}: {e}"
                )
            return result
        for s, (num_accepted, token_id) in zip(speculating, verified, strict=True):
            result.sampled[s.request_id] = SampledToken(token_id)
            result.num_accepted_draft_tokens[s.request_id] = num_accepted
        return result

    def _sample_each(
        self, logits: torch.Tensor, sampling: list[ScheduledRequest]
    ) -> ModelRunnerOutput:
        """One row at a time, so that a request the sampler cannot handle fails alone.

        The forward pass already succeeded: every request's KV is written. A request whose row
        fails gets an error (the scheduler frees its blocks without advancing it); the others get
        their token and advance as in any step. Greedy and seeded rows get the tokens the batch
        would have given them; unseeded random rows a fresh, equally valid draw."""
        output = ModelRunnerOutput({})
        for row, s in enumerate(sampling):
            try:
                tensors = self._sampling_tensors([s])
                [token] = self.sampler(logits[row : row + 1], tensors)
            except Exception as e:
                logger.exception("sampling request %s failed", s.request_id)
                output.errors[s.request_id] = (
                    f"internal error while sampling this request: {type(e).__name__}: {e}"
                )
            else:
                output.sampled[s.request_id] = token
        return self._advance_grammars(output)

    def _sampling_tensors(self, sampling: list[ScheduledRequest]) -> SamplingTensors:
        tensors = build_sampling_tensors(sampling, self._generator_for)
        if self.structured_outputs is not None:
            mask = self.structured_outputs.bitmask([s.request_id for s in sampling])
            if mask is not None:
                tensors.grammar_bitmask, tensors.grammar_rows = mask
        return tensors

    def _advance_grammars(self, output: ModelRunnerOutput) -> ModelRunnerOutput:
        """Each guided request's matcher consumes its sampled token. The scheduler appends every
        sampled token (a request aborted meanwhile is released whole), so matcher and output
        tokens stay in step. A token the grammar rejects fails that request alone: the client's
        doing when the grammar dead-ends there (a 400), else a bug. So does a constraint whose
        mask went over its time budget (the client's doing: its token is dropped, its request
        fails with the reason)."""
        manager = self.structured_outputs
        if manager is None or manager.num_live == 0:
            return output
        for request_id, reason in manager.take_failures().items():
            output.sampled.pop(request_id, None)
            output.errors[request_id] = reason
        guided = [(r, t) for r, t in output.sampled.items() if manager.is_guided(r)]
        for request_id, token in guided:
            accepted, terminated = manager.accept(request_id, token.token_id)
            if not accepted:
                del output.sampled[request_id]
                output.errors[request_id] = manager.rejection(request_id, token.token_id)
            token.ends_grammar = terminated
        return output

    def _generator_for(self, s: ScheduledRequest) -> torch.Generator | None:
        """A seeded request's generator, seeded for this step's position (its output tokens so
        far, a continuation's included): O(1) at any position, and the same draws however often
        the step is sampled (engine/sampling/step_seed.py)."""
        seed = s.sampling_params.seed
        if seed is None or s.sampling_params.is_greedy:
            return None
        gen = self.generators.get(s.request_id)
        if gen is None:
            gen = self.generators[s.request_id] = torch.Generator(device="cpu")
        return gen.manual_seed(step_seed(seed, len(s.output_token_ids)))


def kv_cache_bytes_per_block(
    config: ModelConfig, block_size: int, dtype: torch.dtype, num_kv_heads: int | None = None
) -> int:
    """One block's bytes over every layer, for `num_kv_heads` (default: all of the model's)."""
    element = torch.empty((), dtype=dtype).element_size()
    heads = config.num_key_value_heads if num_kv_heads is None else num_kv_heads
    per_layer = 2 * block_size * heads * cache_head_width(config.head_dim, dtype) * element
    return per_layer * config.num_hidden_layers


def allocate_kv_caches(
    config: ModelConfig,
    num_blocks: int,
    block_size: int,
    dtype: torch.dtype,
    device: torch.device,
    num_kv_heads: int | None = None,
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """One [num_blocks, block_size, num_kv_heads, head_dim] K and V tensor per layer (head_dim + 4
    for int8: each row's scale after it, engine/attention/kv_quant.py)."""
    shape = (
        config.num_hidden_layers,
        2,
        num_blocks,
        block_size,
        config.num_key_value_heads if num_kv_heads is None else num_kv_heads,
        cache_head_width(config.head_dim, dtype),
    )
    if device.type == "cpu":
        storage = zeroed_tensor(shape, dtype)  # zero pages from the kernel, none written now
    else:
        storage = torch.zeros(shape, dtype=dtype, device=device)
    return [(storage[i, 0], storage[i, 1]) for i in range(config.num_hidden_layers)]
