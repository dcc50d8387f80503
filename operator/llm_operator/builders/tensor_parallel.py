"""What a tensor-parallel engine pod needs beyond `--tensor-parallel-size`: a /dev/shm big
enough for every rank, and the environment its ranks meet by.

All ranks of an engine run in its one container (rank 0 spawns the others), so they meet on the
pod's loopback: a fixed port is safe (nothing else in the pod binds it) and keeps the pod's
network surface unchanged.
"""

from decimal import Decimal

from llm_operator.builders.context import BuildContext
from llm_operator.k8s.diff import parse_quantity

# Where the ranks of one engine meet (127.0.0.1 inside the pod): PAGEDOCK_TENSOR_PARALLEL_PORT.
TENSOR_PARALLEL_PORT = 29500
_BINARY_UNITS = (("Gi", 1024**3), ("Mi", 1024**2), ("Ki", 1024))


def tensor_parallel_env(ctx: BuildContext) -> list[dict[str, str]]:
    """Env vars of the engine container; none without tensor parallelism."""
    if ctx.spec.engine.tensor_parallel_size == 1:
        return []
    env = [{"name": "PAGEDOCK_TENSOR_PARALLEL_PORT", "value": str(TENSOR_PARALLEL_PORT)}]
    if ctx.spec.resources.gpus:
        # NCCL's bootstrap between the ranks stays on the loopback: they share the pod.
        env.append({"name": "NCCL_SOCKET_IFNAME", "value": "lo"})
    return env


def shm_size_limit(ctx: BuildContext) -> int | str:
    """resources.shmSize per rank, times the ranks (as written when there is one rank)."""
    per_rank = ctx.spec.resources.shm_size
    ranks = ctx.spec.engine.tensor_parallel_size
    if ranks == 1:
        return per_rank
    total = parse_quantity(per_rank)
    assert total is not None  # the spec checked the quantity
    return _format_bytes(total * ranks)


def _format_bytes(value: Decimal) -> int | str:
    for suffix, size in _BINARY_UNITS:
        if value % size == 0:
            return f"{int(value // size)}{suffix}"
    return int(value)
