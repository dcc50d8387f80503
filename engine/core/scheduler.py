"""Continuous batching: every step re-forms the batch under a token budget.

Each step, running requests go first: their decodes (a token each), then their prefill chunks, the
shortest remaining first, so a long prompt never holds a decode back; then waiting requests join in
the waiting queue's order (fair between tenants: engine/core/fair_queue.py) while budget, sequence
slots and KV blocks last, and none less urgent than the step's first (the queue's shares_step:
when the first is a light tenant's or a more urgent prompt, the others' running prefill chunks
wait a step too); prefill and decode share the step. With long_prefill_token_threshold,
a prompt with more left than that takes at most that many tokens a step (as in vLLM).
A step with running decodes takes a fifth of the token budget in prefill (all of it while prompts
awaiting their first token are at least half the decodes), or with an inter-token target
(max_step_ms) as many prefill tokens as the learned step cost fits under it, stretched while those
prompts outnumber the decodes (engine/core/step_time.py). When the pool runs dry for a running
request, the lowest-priority (then newest) running request is preempted by recompute: its blocks
are freed and it returns to the front of the queue. With LoRA, a request for an adapter is admitted
only with an adapter slot. An embedding request is a prompt like any other; it finishes, pooled,
once its prompt is computed. Speculative decoding: engine/core/speculation.py."""

from __future__ import annotations

import time

from engine.config import EngineConfig
from engine.core.fair_queue import make_waiting_queue
from engine.core.kv_cache_manager import KVCacheManager
from engine.core.kv_events import KVEvent
from engine.core.request import Request, RequestStatus
from engine.core.scheduler_output import (
    EngineCoreOutput,
    ModelRunnerOutput,
    SampledToken,
    ScheduledRequest,
    SchedulerOutput,
)
from engine.core.speculation import Speculation
from engine.core.step_time import StepTimeModel
from engine.core.stop_check import append_checked
from engine.lora.slots import LoRASlots
from pagedock.errors import UnknownRequestError
from pagedock.kv.block_hash import BlockHash


class Scheduler:
    def __init__(
        self,
        config: EngineConfig,
        num_kv_blocks: int,
        max_model_len: int,
        root_hash: BlockHash,
    ) -> None:
        self.config = config
        self.max_model_len = max_model_len
        self.block_size = config.block_size
        self.token_budget = config.max_num_batched_tokens
        self.kv_cache_manager = KVCacheManager(
            num_kv_blocks, config.block_size, root_hash, config.enable_prefix_caching
        )
        self.requests: dict[str, Request] = {}
        self.waiting = make_waiting_queue(config.scheduling_policy, config.fairness)
        self.running: list[Request] = []
        self.finished_req_ids: set[str] = set()
        self.num_preemptions = 0
        self.step_time = StepTimeModel()
        self.lora_slots = LoRASlots(config.max_loras) if config.enable_lora else None
        spec_config = config.speculative
        self.speculation = None if spec_config is None else Speculation(spec_config, max_model_len)

    # ---- requests in and out -------------------------------------------------------------

    def add_request(self, request: Request) -> None:
        if request.request_id in self.requests:
            raise ValueError(f"request id {request.request_id!r} is already in use")
        self.requests[request.request_id] = request
        self.waiting.add(request)

    def finish_request(self, request_id: str, status: RequestStatus) -> Request:
        """End a request from outside (abort, stop string): free its blocks, drop it."""
        request = self.requests.get(request_id)
        if request is None:
            raise UnknownRequestError(f"no request with id {request_id!r}")
        if request.status == RequestStatus.RUNNING:
            self.running.remove(request)
        else:
            self.waiting.remove(request)
        self._free(request, status)
        return request

    def has_unfinished_requests(self) -> bool:
        return bool(self.running) or len(self.waiting) > 0

    def has_request(self, request_id: str) -> bool:
        return request_id in self.requests

    # ---- what callers may know of the KV cache -------------------------------------------

    def take_kv_events(self) -> list[KVEvent]:
        return self.kv_cache_manager.take_events()

    def cached_block_hashes(self) -> list[BlockHash]:
        return self.kv_cache_manager.cached_block_hashes()

    def reset_prefix_cache(self) -> bool:
        """Forget every cached block hash; False (nothing done) while any request holds blocks."""
        return self.kv_cache_manager.pool.reset_prefix_cache()

    # ---- one step ------------------------------------------------------------------------

    def schedule(self) -> SchedulerOutput:
        if self.config.scheduling_policy == "priority":
            # Serve the most important first; the victim of a preemption is then the last.
            self.running.sort(key=lambda r: (r.priority, r.arrival_time))
        decodes = [r for r in self.running if _remaining(r) <= 1]
        prefills = sorted((r for r in self.running if _remaining(r) > 1), key=_remaining)
        first = self._first_newcomer()
        if first is not None:  # a light tenant's or more urgent prompt: beside the decodes only
            prefills = [r for r in prefills if self.waiting.shares_step(first, r)]
        scheduled: list[ScheduledRequest] = []
        preempted: list[str] = []
        num_prompts = len(prefills) + len(self.waiting)
        step_budget = self.step_time.step_budget(
            self.config, self.token_budget, len(decodes), num_prompts
        )
        cap = self.config.long_prefill_token_threshold or self.token_budget
        budget = self._schedule_running(decodes + prefills, step_budget, scheduled, preempted, cap)
        if not preempted and first is not None:
            # A step that had to preempt has no blocks to spare for newcomers.
            self._schedule_waiting(first, budget, scheduled, cap)
        finished, self.finished_req_ids = self.finished_req_ids, set()
        num_tokens = sum(s.num_new_tokens for s in scheduled)
        return SchedulerOutput(
            scheduled=scheduled,
            num_scheduled_tokens=num_tokens,
            preempted_req_ids=preempted,
            finished_req_ids=finished,
            num_decode_tokens=sum(s.is_decode for s in scheduled),
        )

    def record_prefill_chunks(self, output: SchedulerOutput, started: float, ended: float) -> None:
        """Each prefill chunk of the step, on its request's timing: when, and how many tokens."""
        for scheduled in output.scheduled:
            if scheduled.num_computed_tokens < len(scheduled.prompt_token_ids):
                request = self.requests.get(scheduled.request_id)
                if request is not None:
                    chunk = (started, ended, len(scheduled.new_token_ids))
                    request.timing.prefill_chunks.append(chunk)

    def observe_step(self, output: SchedulerOutput, seconds: float) -> None:
        """The step `output` took `seconds` (schedule to update): teaches the step-cost model."""
        num_prefill = output.num_scheduled_tokens - output.num_decode_tokens
        self.step_time.observe(output.num_decode_tokens, num_prefill, seconds)

    def _schedule_running(
        self,
        order: list[Request],
        budget: int,
        scheduled: list[ScheduledRequest],
        preempted: list[str],
        cap: int,
    ) -> int:
        for request in order:
            if budget <= 0:
                break
            if request.status != RequestStatus.RUNNING:
                continue  # preempted earlier in this step
            drafts = [] if self.speculation is None else self.speculation.fitting(request, budget)
            num_new = min(_remaining(request), budget, cap) + len(drafts)
            while self.kv_cache_manager.allocate_slots(request, num_new) is None:
                if drafts:  # no blocks for the draft: decode without it before preempting
                    num_new, drafts = num_new - len(drafts), []
                    continue
                victim = self._pick_victim()
                budget += _unschedule(victim, scheduled)
                self._preempt(victim)
                preempted.append(victim.request_id)
                if victim is request:
                    break
            else:
                scheduled.append(self._scheduled(request, num_new, drafts))
                budget -= num_new
        return budget

    def _first_newcomer(self) -> Request | None:
        """The waiting request this step would admit first, if one can be admitted (what
        `_schedule_waiting` starts from: nothing before it changes the waiting queue, bar a
        preemption, after which no newcomer is admitted)."""
        if not len(self.waiting) or len(self.running) >= self.config.max_num_seqs:
            return None
        self.waiting.begin_step(self.running)
        return self.waiting.select(self.lora_slots)

    def _schedule_waiting(
        self, first: Request, budget: int, scheduled: list[ScheduledRequest], cap: int
    ) -> None:
        request: Request | None = first
        while request is not None and budget > 0 and len(self.running) < self.config.max_num_seqs:
            if request is not first and not self.waiting.shares_step(first, request):
                break  # the step stays short for a more urgent newcomer
            computed_blocks, num_computed = request.limit_prefix_hit(
                self.kv_cache_manager.get_computed_blocks(request)[0], self.block_size
            )
            num_new = request.num_tokens - num_computed
            if num_new > budget and not self.config.enable_chunked_prefill:
                break
            num_new = min(num_new, budget, cap)
            new_blocks = self.kv_cache_manager.allocate_slots(
                request, num_new, computed_blocks, num_computed
            )
            if new_blocks is None:
                break
            if request is self.waiting.peek():
                self.waiting.pop()
            else:
                self.waiting.remove(request)
            request.status = RequestStatus.RUNNING
            if request.lora_name is not None and self.lora_slots is not None:
                request.lora_slot = self.lora_slots.acquire(request.lora_name)
            self.kv_cache_manager.record_prefix_lookup(request.num_tokens, num_computed)
            request.num_computed_tokens = num_computed
            if request.num_cached_tokens < 0:
                request.num_cached_tokens = num_computed
            if request.timing.first_scheduled_time is None:  # n > 1: siblings share the record
                request.timing.first_scheduled_time = time.monotonic()
            self.running.append(request)
            scheduled.append(self._scheduled(request, num_new))
            budget -= num_new
            # None: nothing waits, or every waiting request's adapter waits for a LoRA slot.
            request = self.waiting.select(self.lora_slots) if len(self.waiting) else None

    def _release_lora_slot(self, request: Request) -> None:
        """The request stops running: its adapter's slot loses a pin."""
        if request.lora_slot >= 0 and self.lora_slots is not None:
            self.lora_slots.release(request.lora_slot)
            request.lora_slot = -1

    def _scheduled(
        self, request: Request, num_new: int, drafts: list[int] | None = None
    ) -> ScheduledRequest:
        return request.to_scheduled(
            num_new, self.kv_cache_manager.get_block_ids(request.request_id), drafts or []
        )

    def _pick_victim(self) -> Request:
        # FCFS: the newest. Priority: running is sorted, so the least important, then newest.
        # Either way a request already scheduled this step (earlier in the list) is never chosen.
        return self.running[-1]

    def _preempt(self, request: Request) -> None:
        self.running.remove(request)
        self.kv_cache_manager.free(request)
        self._release_lora_slot(request)
        request.status = RequestStatus.PREEMPTED
        request.num_computed_tokens = 0
        request.spec_token_ids = ()
        request.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.prepend(request)

    # ---- after the forward pass ----------------------------------------------------------

    def update(
        self, output: SchedulerOutput, runner_output: ModelRunnerOutput
    ) -> list[EngineCoreOutput]:
        """Advance progress by what was computed, append sampled tokens, finish what stopped.

        A request with an error is finished and its blocks freed *before* its progress advances
        or its blocks are cached: a failed forward may have left its KV unwritten, and a cached
        hash over unwritten KV would poison later prefix hits. The others of the step advance as
        usual (the runner isolates sampling failures, so their KV and tokens are good)."""
        core_outputs: list[EngineCoreOutput] = []
        for item in output.scheduled:
            request = self.requests.get(item.request_id)
            if request is None or request.status != RequestStatus.RUNNING:
                continue  # finished from outside (abort) while the step ran
            error = runner_output.errors.get(item.request_id)
            if error is not None:
                self._finish_running(request, RequestStatus.FINISHED_ERROR)
                core_outputs.append(EngineCoreOutput(request.request_id, [], "error", error=error))
                continue
            num_drafts = len(item.draft_token_ids)
            num_accepted = runner_output.num_accepted_draft_tokens.get(item.request_id, 0)
            # Only verified tokens count: a rejected draft token's slot is written again later.
            request.num_computed_tokens += item.num_new_tokens - (num_drafts - num_accepted)
            if item.num_prompt_logprobs_rows:
                request.add_prompt_logprobs(runner_output.prompt_logprobs[item.request_id])
            self.waiting.charge(request.tenant, item.num_new_tokens)
            self.kv_cache_manager.cache_blocks(request)
            if request.pooling_params is not None and _remaining(request) == 0:
                status, pooled = request.pooled(runner_output.pooler_output.get(item.request_id))
                self._finish_running(request, status)
                core_outputs.append(pooled)
                continue
            sampled = runner_output.sampled.get(item.request_id)
            if sampled is None:
                continue
            if self.speculation is not None and num_drafts:
                self.speculation.observe(request, num_drafts, num_accepted)
            accepted = item.draft_token_ids[:num_accepted]
            core_outputs.append(self._append_tokens(request, accepted, sampled))
        if self.speculation is not None:
            self.speculation.propose(self.running)
        return core_outputs

    def _append_tokens(
        self, request: Request, accepted: list[int], sampled: SampledToken
    ) -> EngineCoreOutput:
        """Append the accepted draft tokens and the sampled one; none after a stop (stop_check)."""
        tokens = [*accepted, sampled.token_id]
        token_ids, status = append_checked(request, tokens, self.max_model_len)
        if sampled.ends_grammar and status is None:
            # The grammar is complete: nothing may follow (even with ignore_eos or min_tokens).
            status = RequestStatus.FINISHED_STOPPED
        if status is not None:
            self._finish_running(request, status)
        return request.step_output(token_ids, sampled)

    def _finish_running(self, request: Request, status: RequestStatus) -> None:
        self.running.remove(request)
        self._free(request, status)

    def _free(self, request: Request, status: RequestStatus) -> None:
        request.status = status
        self.kv_cache_manager.free(request)
        self._release_lora_slot(request)
        del self.requests[request.request_id]
        self.finished_req_ids.add(request.request_id)


def _remaining(request: Request) -> int:
    """Tokens the request has yet to compute: 1 for a decode, more for a prompt (or a preempted
    request's recompute)."""
    return request.num_tokens - request.num_computed_tokens


def _unschedule(victim: Request, scheduled: list[ScheduledRequest]) -> int:
    """Take a preemption victim back out of this step, if it was in it; the tokens it gives back."""
    for index, item in enumerate(scheduled):
        if item.request_id == victim.request_id:
            del scheduled[index]
            return item.num_new_tokens
    return 0
