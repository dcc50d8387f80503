"""n > 1: one request fans out into n child requests that share the prompt's KV blocks.

The first child runs alone until its prompt is computed and its full blocks are cached; the other
n - 1 then join and find those blocks in the prefix cache (ref counts shared, nothing copied: only
full blocks are shared, and a request never writes into a full block). With prompt logprobs, which
only the first child computes, the others wait for it even without prefix caching, so the prompt
logprobs come with the request's first output.

This is the engine side (the engine thread): which children wait, which are unfinished, what an
abort of the parent ends. Merging the children's outputs back under the parent's id is the
output path's (engine/runtime/output_processor.py), which may run on another thread.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace

from engine.core.request import Request
from engine.core.scheduler_output import EngineCoreOutput
from engine.inputs.engine_request import EngineRequest
from engine.inputs.sampling_params import SamplingParams
from pagedock.limits import SEED_MAX

CHILD_SEPARATOR = "#"


def child_request_id(parent_id: str, index: int) -> str:
    return f"{parent_id}{CHILD_SEPARATOR}{index}"


def child_requests(request: EngineRequest) -> list[EngineRequest]:
    """The n completions of a request, one EngineRequest each, by index."""
    return [
        replace(
            request,
            request_id=child_request_id(request.request_id, i),
            sampling_params=child_params(request.sampling_params, i),
        )
        for i in range(request.sampling_params.n)
    ]


def child_params(params: SamplingParams, index: int) -> SamplingParams:
    """n = 1 per child; a seeded request seeds each child differently (so choices differ) but
    reproducibly; prompt logprobs, reported once per prompt, are the first child's alone. A
    copy, not validated again: `params` passed the InputProcessor already."""
    child = copy.copy(params)
    child.n = 1
    if index > 0:
        child.prompt_logprobs = None
    if params.seed is not None:
        child.seed = child_seed(params.seed, index)
    return child


def child_seed(seed: int, index: int) -> int:
    """seed + index, wrapped into [SEED_MIN, SEED_MAX] (torch's 64-bit seed range): any valid
    seed gives n valid, distinct child seeds, so a seed near the top is no overflow in the step."""
    child = seed + index
    return child - 2**64 if child > SEED_MAX else child


@dataclass
class _FanOut:
    # Children waiting for the first child's prompt to be cached.
    pending: list[Request] = field(default_factory=list)
    # Children not finished yet, pending ones included.
    unfinished: set[str] = field(default_factory=set)


class ParallelSampling:
    def __init__(self) -> None:
        self._parents: dict[str, _FanOut] = {}
        self._child_to_parent: dict[str, str] = {}

    def register(self, parent_id: str, children: list[Request], defer: bool) -> list[Request]:
        """Track a fanned-out request; returns the children to schedule now."""
        fan_out = _FanOut(unfinished={c.request_id for c in children})
        for child in children:
            self._child_to_parent[child.request_id] = parent_id
        self._parents[parent_id] = fan_out
        if not defer:
            return children
        fan_out.pending = children[1:]
        return children[:1]

    def is_parent(self, request_id: str) -> bool:
        return request_id in self._parents

    def is_unfinished_child(self, request_id: str) -> bool:
        """A child not finished yet, pending (not scheduled yet) ones included."""
        return request_id in self._child_to_parent

    def on_core_outputs(
        self, core_outputs: list[EngineCoreOutput]
    ) -> tuple[list[Request], list[str]]:
        """Note the finished children. Returns the children now released (a child produced
        output, so its prompt blocks are cached and its siblings may join), and the parents a
        child of which failed: the request is an error whatever its siblings do, so the caller
        aborts them (a constraint too costly for one child is as costly for the others)."""
        released: list[Request] = []
        failed: list[str] = []
        for core in core_outputs:
            parent_id = self._child_to_parent.get(core.request_id)
            if parent_id is None:
                continue
            fan_out = self._parents[parent_id]
            if core.error is not None:
                failed.append(parent_id)
            elif parent_id not in failed:
                released += fan_out.pending
                fan_out.pending = []
            if core.finish_reason is not None:
                self.child_finished(core.request_id)
        return released, [p for p in dict.fromkeys(failed) if p in self._parents]

    def child_finished(self, child_id: str) -> None:
        """A child ended (its own finish, or a stop string the output path found); forgets the
        parent with its last child."""
        parent_id = self._child_to_parent.pop(child_id, None)
        if parent_id is None:
            return
        fan_out = self._parents[parent_id]
        fan_out.unfinished.discard(child_id)
        if not fan_out.unfinished:
            del self._parents[parent_id]

    def abort(self, parent_id: str) -> tuple[list[str], set[str]]:
        """Forget a parent; returns its unfinished children (sorted) and which of them were
        still pending (never scheduled)."""
        fan_out = self._parents.pop(parent_id)
        for child_id in fan_out.unfinished:
            del self._child_to_parent[child_id]
        pending = {c.request_id for c in fan_out.pending}
        return sorted(fan_out.unfinished), pending

    def _fan_out_of(self, child_id: str) -> _FanOut | None:
        parent_id = self._child_to_parent.get(child_id)
        return None if parent_id is None else self._parents[parent_id]
