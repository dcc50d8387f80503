"""n > 1: one request fans out into n child requests that share the prompt's KV blocks.

The first child runs alone until its prompt is computed and its full blocks are cached; the other
n - 1 then join and find those blocks in the prefix cache (ref counts shared, nothing copied: only
full blocks are shared, and a request never writes into a full block). Their outputs are merged
back under the parent's id, each completion carrying its index.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from engine.core.request import Request
from engine.outputs import RequestOutput
from engine.sampling_params import SamplingParams

CHILD_SEPARATOR = "#"


def child_request_id(parent_id: str, index: int) -> str:
    return f"{parent_id}{CHILD_SEPARATOR}{index}"


def child_params(params: SamplingParams, index: int) -> SamplingParams:
    """n = 1 per child; a seeded request seeds each child differently (so choices differ) but
    reproducibly."""
    seed = None if params.seed is None else params.seed + index
    return replace(params, n=1, seed=seed)


@dataclass
class ParentRequest:
    request_id: str
    n: int
    prompt: str | None
    # Children waiting for the first child's prompt to be cached.
    pending: list[Request] = field(default_factory=list)
    unfinished: set[str] = field(default_factory=set)


class ParallelSampling:
    def __init__(self) -> None:
        self.parents: dict[str, ParentRequest] = {}
        self.child_to_parent: dict[str, tuple[ParentRequest, int]] = {}

    def register(
        self, parent_id: str, prompt: str | None, children: list[Request], defer: bool
    ) -> list[Request]:
        """Track a fanned-out request; returns the children to schedule now."""
        parent = ParentRequest(parent_id, len(children), prompt)
        for index, child in enumerate(children):
            self.child_to_parent[child.request_id] = (parent, index)
            parent.unfinished.add(child.request_id)
        self.parents[parent_id] = parent
        if not defer:
            return children
        parent.pending = children[1:]
        return children[:1]

    def is_parent(self, request_id: str) -> bool:
        return request_id in self.parents

    def merge(self, outputs: list[RequestOutput]) -> tuple[list[RequestOutput], list[Request]]:
        """Child outputs become parent outputs; returns them and the children now released."""
        merged: dict[str, RequestOutput] = {}
        passthrough: list[RequestOutput] = []
        released: list[Request] = []
        for output in outputs:
            entry = self.child_to_parent.get(output.request_id)
            if entry is None:
                passthrough.append(output)
                continue
            parent, index = entry
            # The first child produced output: its prompt blocks are cached, the rest may join.
            released += parent.pending
            parent.pending = []
            self._add_completion(merged, parent, index, output)
        return passthrough + list(merged.values()), released

    def _add_completion(
        self,
        merged: dict[str, RequestOutput],
        parent: ParentRequest,
        index: int,
        output: RequestOutput,
    ) -> None:
        completion = output.outputs[0]
        completion.index = index
        if output.finished:
            parent.unfinished.discard(output.request_id)
            del self.child_to_parent[output.request_id]
        target = merged.get(parent.request_id)
        if target is None:
            target = RequestOutput(
                parent.request_id,
                parent.prompt,
                output.prompt_token_ids,
                [],
                False,
                output.metrics,
                output.error,
            )
            merged[parent.request_id] = target
        target.outputs.append(completion)
        target.outputs.sort(key=lambda c: c.index)
        target.error = target.error or output.error
        if not parent.unfinished:
            target.finished = True
            del self.parents[parent.request_id]

    def children_to_abort(self, parent_id: str) -> tuple[list[str], int]:
        """Unfinished scheduled children of a parent, and how many pending ones were dropped;
        forgets the parent."""
        parent = self.parents.pop(parent_id)
        pending_ids = {c.request_id for c in parent.pending}
        for child_id in parent.unfinished:
            self.child_to_parent.pop(child_id, None)
        running = sorted(parent.unfinished - pending_ids)
        return running, len(pending_ids)
