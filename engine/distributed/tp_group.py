"""The tensor-parallel process group: the model's collectives, counted.

gloo on the CPU, NCCL on CUDA. Every collective has a timeout (COLLECTIVE_TIMEOUT_S): a rank that
stops answering fails its peers' collectives instead of hanging them. A rank that exits closes
its sockets, and gloo fails the peers' collectives at once.

The counters (`num_all_reduces`, `all_reduce_bytes`, `num_gathers`, `gather_bytes`) are plain
ints bumped per eager call; a replayed CUDA graph runs its collectives without Python, so
decode steps served from graphs are not counted.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

# How long a collective (and the rendezvous) waits for the slowest rank before failing.
COLLECTIVE_TIMEOUT_S = 120.0


@dataclass
class CollectiveCounts:
    """Collectives this rank ran since the engine started (the benchmark's per-step figure)."""

    num_all_reduces: int = 0
    all_reduce_bytes: int = 0
    num_gathers: int = 0
    gather_bytes: int = 0


class TPGroup:
    """This process's rank in the tensor-parallel group.

    NOTE: the group is a process group object of its own (a TCPStore and a gloo or NCCL group
    on it), not torch.distributed's global default group, so that one process can hold several
    engines one after another (tests) and nothing else in the process sees the group."""

    def __init__(self, rank: int, world_size: int, port: int, device: torch.device) -> None:
        self.rank = rank
        self.world_size = world_size
        self.device = device
        self.counts = CollectiveCounts()
        timeout = datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S)
        self._store = dist.TCPStore(
            "127.0.0.1", port, world_size, is_master=rank == 0, timeout=timeout
        )
        self._group = _make_group(self._store, rank, world_size, device, timeout)

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        """Sum `x` over the ranks, in place (every rank gets the sum)."""
        self.counts.num_all_reduces += 1
        self.counts.all_reduce_bytes += x.numel() * x.element_size()
        self._group.allreduce([x]).wait()
        return x

    def gather_vocab(self, local_logits: torch.Tensor, vocab_size: int) -> torch.Tensor:
        """[rows, vocab_per_rank] on each rank -> [rows, vocab_size] on rank 0; other ranks get
        an empty tensor (only rank 0 samples)."""
        x = local_logits.contiguous()
        self.counts.num_gathers += 1
        self.counts.gather_bytes += x.numel() * x.element_size() * (self.world_size - 1)
        options = dist.GatherOptions()
        options.rootRank = 0
        if self.rank != 0:
            self._group.gather([], [x], options).wait()
            return x[:, :0]
        parts = [torch.empty_like(x) for _ in range(self.world_size)]
        self._group.gather([parts], [x], options).wait()
        return torch.cat(parts, dim=-1)[:, :vocab_size]

    def min_over_ranks(self, value: int) -> int:
        """The smallest `value` any rank holds (the KV pool size every rank can afford)."""
        t = torch.tensor([value], dtype=torch.int64, device=self.device)
        self._group.allreduce([t], dist.ReduceOp.MIN).wait()
        return int(t.item())


def _make_group(
    store: dist.Store,
    rank: int,
    world_size: int,
    device: torch.device,
    timeout: datetime.timedelta,
) -> Any:
    """A gloo or NCCL backend object (their Python types share no useful base)."""
    if device.type == "cuda":
        nccl_options = dist.ProcessGroupNCCL.Options()
        nccl_options._timeout = timeout
        return dist.ProcessGroupNCCL(store, rank, world_size, nccl_options)
    gloo_options = dist.ProcessGroupGloo._Options()  # type: ignore[attr-defined]
    gloo_options._timeout = timeout
    gloo_options._devices = [dist.ProcessGroupGloo.create_device(hostname="127.0.0.1")]
    return dist.ProcessGroupGloo(store, rank, world_size, gloo_options)
