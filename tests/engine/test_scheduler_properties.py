"""Property tests: random add / step / abort sequences keep the block pool and scheduler sound."""

from __future__ import annotations

from collections import Counter

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from engine.core.request import RequestStatus
from engine.core.scheduler_output import ModelRunnerOutput, SampledToken
from tests.engine.factories import EOS, make_request, make_scheduler

SHARED_PREFIXES = [list(range(500, 532)), list(range(600, 648))]


class SchedulerMachine(RuleBasedStateMachine):
    # 12 blocks of 16 hold 192 tokens: one full-length sequence (128) fits, six don't, so
    # preemption by recompute happens all the time.
    policy = "fcfs"

    def __init__(self) -> None:
        super().__init__()
        self.sched = make_scheduler(
            num_blocks=12,
            max_model_len=128,
            block_size=16,
            max_num_batched_tokens=48,
            max_num_seqs=6,
            scheduling_policy=self.policy,
        )
        self.added: list[str] = []
        self.finished: Counter[str] = Counter()
        # A clock of the machine's own: arrivals by time.monotonic() would group requests into
        # the scheduler's arrival waves (100 ms) by how fast the machine ran the rules, so a
        # replay could schedule differently, which Hypothesis rejects as flaky.
        self.clock = 0.0

    @rule(
        prefix=st.sampled_from([None, 0, 1]),
        tail=st.integers(1, 60),
        max_tokens=st.integers(1, 40),
        priority=st.integers(0, 2),
        gap_s=st.sampled_from([0.0, 0.05, 0.2]),
    )
    def add(
        self, prefix: int | None, tail: int, max_tokens: int, priority: int, gap_s: float
    ) -> None:
        head = SHARED_PREFIXES[prefix] if prefix is not None else []
        prompt = head + [1000 + len(self.added) * 64 + i for i in range(tail)]
        max_tokens = min(max_tokens, 128 - len(prompt))
        self.clock += gap_s
        request = make_request(
            prompt,
            max_tokens=max_tokens,
            request_id=f"r{len(self.added):03d}",  # not a process-wide counter: replays agree
            priority=priority,
            arrival_time=self.clock,
        )
        self.sched.add_request(request)
        self.added.append(request.request_id)

    @rule(eos_every=st.sampled_from([0, 0, 0, 2, 5]))
    def step(self, eos_every: int) -> None:
        out = self.sched.schedule()
        sampled = {}
        for i, s in enumerate(out.scheduled):
            if s.do_sample:
                token = EOS if eos_every and (i + 1) % eos_every == 0 else 7
                sampled[s.request_id] = SampledToken(token)
        for core in self.sched.update(out, ModelRunnerOutput(sampled)):
            if core.finish_reason is not None:
                self.finished[core.request_id] += 1

    @precondition(lambda self: bool(self.sched.requests))
    @rule(data=st.data())
    def abort(self, data: st.DataObject) -> None:
        request_id = data.draw(st.sampled_from(sorted(self.sched.requests)))
        self.sched.finish_request(request_id, RequestStatus.FINISHED_ABORTED)
        self.finished[request_id] += 1

    @invariant()
    def ref_counts_equal_the_requests_holding_each_block(self) -> None:
        kv = self.sched.kv_cache_manager
        holders: Counter[int] = Counter()
        for blocks in kv.req_to_blocks.values():
            holders.update(b.block_id for b in blocks)
        for block in kv.pool.blocks:
            assert block.ref_cnt >= 0
            assert block.ref_cnt == holders[block.block_id]

    @invariant()
    def a_block_is_free_exactly_when_unreferenced(self) -> None:
        pool = self.sched.kv_cache_manager.pool
        free_ids = {b.block_id for b in pool.free_queue}
        assert len(free_ids) == pool.num_free_blocks
        for block in pool.blocks:
            assert (block.block_id in free_ids) == (block.ref_cnt == 0)

    @invariant()
    def the_hash_map_and_the_blocks_agree(self) -> None:
        pool = self.sched.kv_cache_manager.pool
        for block_hash, block in pool.cached_blocks.items():
            assert block.block_hash == block_hash

    @invariant()
    def only_running_requests_hold_blocks(self) -> None:
        running = {r.request_id for r in self.sched.running}
        assert set(self.sched.kv_cache_manager.req_to_blocks) <= running

    def teardown(self) -> None:
        # Drain: everything finishes, exactly once, and every block comes home.
        for _ in range(2000):
            if not self.sched.has_unfinished_requests():
                break
            self.step(eos_every=0)
        assert not self.sched.has_unfinished_requests(), "a request was starved"
        assert sorted(self.finished) == sorted(self.added)
        assert set(self.finished.values()) <= {1}
        pool = self.sched.kv_cache_manager.pool
        assert pool.num_free_blocks == pool.num_blocks


class PrioritySchedulerMachine(SchedulerMachine):
    policy = "priority"


_SETTINGS = settings(
    max_examples=60,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
SchedulerMachine.TestCase.settings = _SETTINGS
PrioritySchedulerMachine.TestCase.settings = _SETTINGS
TestFCFSScheduler = SchedulerMachine.TestCase
TestPriorityScheduler = PrioritySchedulerMachine.TestCase
