"""How a model's weights get into it: `mmap` (the default) or `copy` (EngineConfig's
weights_load_strategy, `--weights-load-strategy`).

    mmap  The model is built without initialising its parameters (they are overwritten anyway);
          a weight the model uses exactly as stored (same name, shape and dtype: the embedding,
          the norms, o_proj and down_proj, not the fused q/k/v and gate/up) becomes the
          parameter itself: a view of the file's memory map (safetensors, the GGUF weight
          cache) or of the tensor just dequantized, with no copy.
    copy  Every parameter is allocated and initialised, then each weight is copied into it.

Why (profiled once on a loaded 2-core VM; the figures to quote are
benchmarks/results/cold_start_stages.json's): `copy` spent ~3 s importing torch._dynamo, which
nn.Embedding's random initialisation on the meta device pulls in (torch._refs.normal_ is a Python
decomposition behind a dynamo guard), and ~2 s copying SmolLM2's 538 MB into freshly faulted
memory. A mapped
weight is also shared, in the page cache, by every engine on the node that maps the same file.
NOTE: a mapped parameter is copy-on-write (safetensors maps the file privately): nothing writes
weights in place, and if something did the file would not change. With tensor parallelism each
rank's slice is a copy either way.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import torch
from torch import nn

WEIGHTS_LOAD_STRATEGIES = ("mmap", "copy")
# The initialisers nn.Linear, nn.Embedding and friends call from reset_parameters().
_INITIALISERS = (
    "uniform_",
    "normal_",
    "trunc_normal_",
    "constant_",
    "ones_",
    "zeros_",
    "xavier_uniform_",
    "xavier_normal_",
    "kaiming_uniform_",
    "kaiming_normal_",
)
# NOTE: process-wide, like the C++ kernels' switch: `pagedock serve` sets it from EngineConfig
# before building the engine (the loader's callers pass no config).
_strategy = "mmap"


def set_weights_load_strategy(strategy: str) -> None:
    if strategy not in WEIGHTS_LOAD_STRATEGIES:
        raise ValueError(f"weights load strategy must be one of {WEIGHTS_LOAD_STRATEGIES}")
    global _strategy
    _strategy = strategy


def weights_load_strategy() -> str:
    return _strategy


@contextmanager
def without_weight_init(enabled: bool = True) -> Iterator[None]:
    """Build modules without running torch.nn.init's initialisers (their parameters are filled
    from the checkpoint right after). Not thread-safe: one model is built at a time."""
    if not enabled:
        yield
        return
    saved = {name: getattr(nn.init, name) for name in _INITIALISERS}
    for name in saved:
        setattr(nn.init, name, _leave_as_is)
    try:
        yield
    finally:
        for name, initialiser in saved.items():
            setattr(nn.init, name, initialiser)


def _leave_as_is(tensor: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
    return tensor


def adopt_as_stored(
    model: nn.Module, weights: Iterable[tuple[str, torch.Tensor]]
) -> Iterator[tuple[str, torch.Tensor]]:
    """Pass the weights on, each one the model uses as stored first made the parameter's data,
    so that the loader's copy into the parameter is a copy onto itself (torch skips it)."""
    params = dict(model.named_parameters())  # a tied lm_head is the embedding's parameter
    for hf_name, tensor in weights:
        param = params.get(hf_name.removeprefix("model."))
        if (
            param is not None
            and param.shape == tensor.shape
            and param.dtype == tensor.dtype
            and param.device == tensor.device
        ):
            param.data = tensor
        yield hf_name, tensor
