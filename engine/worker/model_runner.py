"""Runs one step on the model: builds the flat varlen batch, runs the forward pass, samples."""

from __future__ import annotations

import logging

import torch

from engine.attention.backend import AttentionBackend
from engine.core.scheduler_output import ModelRunnerOutput, ScheduledRequest, SchedulerOutput
from engine.models.llama import LlamaForCausalLM
from engine.models.model_config import ModelConfig
from engine.worker.cuda_graph_runner import DecodeGraphRunner, GraphCapture, is_graphable
from engine.worker.input_batch import build_model_inputs, order_decodes_first
from engine.worker.sampler import Sampler
from engine.worker.sampling_batch import build_sampling_tensors

logger = logging.getLogger("pagedock.engine")


class ModelRunner:
    def __init__(
        self,
        model: LlamaForCausalLM,
        config: ModelConfig,
        backend: AttentionBackend,
        num_kv_blocks: int,
        block_size: int,
        dtype: torch.dtype,
        device: torch.device,
        seed: int = 0,
    ) -> None:
        self.model = model
        self.config = config
        self.backend = backend
        self.block_size = block_size
        self.device = device
        self.kv_caches = allocate_kv_caches(config, num_kv_blocks, block_size, dtype, device)
        self.sampler = Sampler(torch.Generator(device="cpu").manual_seed(seed))
        # Per-request generators for requests with their own seed; dropped when they finish.
        self.generators: dict[str, torch.Generator] = {}
        self.graphs: DecodeGraphRunner | None = None

    def capture_decode_graphs(
        self, max_num_seqs: int, max_model_len: int, capturer: GraphCapture
    ) -> None:
        """From now on decode-only steps replay captured graphs (engine/worker/cuda_graph_runner.py)."""
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
        if output.is_empty:
            return ModelRunnerOutput({})
        batch = order_decodes_first(output.scheduled)
        if self.graphs is not None and is_graphable(batch, self.graphs.max_size):
            logits, sampling = self.graphs.run(batch), batch
        else:
            inputs = build_model_inputs(batch, self.block_size, self.device)
            logits = self.model(
                inputs.input_ids,
                inputs.positions,
                self.kv_caches,
                inputs.meta,
                inputs.sample_indices,
            )
            sampling = inputs.sample_requests
        if not sampling:
            return ModelRunnerOutput({})
        return self._sample(logits.cpu(), sampling)

    def _sample(self, logits: torch.Tensor, sampling: list[ScheduledRequest]) -> ModelRunnerOutput:
        """Sample the step's rows in one batch; if that fails, each row alone (`_sample_each`)."""
        saved: list[tuple[torch.Generator, torch.Tensor]] = []
        try:
            tensors = build_sampling_tensors(sampling, self._generator_for)
            saved = [(g, g.get_state()) for g in tensors.generators if g is not None]
            tokens = self.sampler(logits, tensors)
        except Exception:
            logger.exception("sampling %d requests together failed; each alone", len(sampling))
            # Seeded rows redraw from where they stood, so their tokens are those of a good step.
            for gen, state in saved:
                gen.set_state(state)
            return self._sample_each(logits, sampling)
        return ModelRunnerOutput({s.request_id: t for s, t in zip(sampling, tokens, strict=True)})

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
                tensors = build_sampling_tensors([s], self._generator_for)
                [token] = self.sampler(logits[row : row + 1], tensors)
            except Exception as e:
                logger.exception("sampling request %s failed", s.request_id)
                output.errors[s.request_id] = (
                    f"internal error while sampling this request: {type(e).__name__}: {e}"
                )
            else:
                output.sampled[s.request_id] = token
        return output

    def _generator_for(self, s: ScheduledRequest) -> torch.Generator | None:
        seed = s.sampling_params.seed
        if seed is None or s.sampling_params.is_greedy:
            return None
        gen = self.generators.get(s.request_id)
        if gen is None:
            gen = torch.Generator(device="cpu").manual_seed(seed)
            self._skip_draws(gen, len(s.output_token_ids))
            self.generators[s.request_id] = gen
        return gen

    def _skip_draws(self, gen: torch.Generator, num_steps: int) -> None:
        """Advance a new generator past the draws of `num_steps` earlier sampling steps: a
        continuation's tokens generated before (on another replica) consumed them there, so its
        seeded draws go on exactly where the original's stood. Each step draws one float32 noise
        row of the vocabulary's width (Sampler._exponential_noise), so one row per step replays it."""
        if num_steps == 0:
            return
        row = torch.empty(self.config.vocab_size, dtype=torch.float32)
        for _ in range(num_steps):
            row.exponential_(generator=gen)


def kv_cache_bytes_per_block(config: ModelConfig, block_size: int, dtype: torch.dtype) -> int:
    element = torch.empty((), dtype=dtype).element_size()
    per_layer = 2 * block_size * config.num_key_value_heads * config.head_dim * element
    return per_layer * config.num_hidden_layers


def allocate_kv_caches(
    config: ModelConfig, num_blocks: int, block_size: int, dtype: torch.dtype, device: torch.device
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """One [num_blocks, block_size, num_kv_heads, head_dim] K and V tensor per layer."""
    shape = (
        config.num_hidden_layers,
        2,
        num_blocks,
        block_size,
        config.num_key_value_heads,
        config.head_dim,
    )
    storage = torch.zeros(shape, dtype=dtype, device=device)
    return [(storage[i, 0], storage[i, 1]) for i in range(config.num_hidden_layers)]
