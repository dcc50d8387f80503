"""How to pool a prompt's hidden states into one embedding (vLLM's PoolingParams); validated at
construction, so bad input fails before it queues.

The pooled hidden states are the model's last hidden states after its final norm (what
transformers' AutoModel returns as `last_hidden_state`). LAST takes the last prompt position's,
MEAN the average over every prompt position, CLS the first position's (the BOS token's for a
llama). Then `dimensions` keeps the first d values (Matryoshka truncation) and `normalize` scales
the vector to unit L2 norm, in that order, as vLLM's embedding head does.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import NoReturn

from pagedock.errors import InvalidRequestError
from pagedock.limits import MAX_INT32

POOLING_TYPES = ("LAST", "MEAN", "CLS")
"""The pooling types an embedding request may name (vLLM's PoolingType names)."""


@dataclass(frozen=True)
class PoolingParams:
    """One embedding request's pooling, with vLLM's field names. `pooling_type` is pagedock's
    addition (vLLM sets it per model, with --pooler-config); None fields take the model's
    default (engine/inputs/pooler_config.py), which the InputProcessor resolves."""

    pooling_type: str | None = None
    """LAST, MEAN or CLS (any case); None: the model's default (LAST for a generative model)."""
    normalize: bool | None = None
    """Scale the embedding to unit L2 norm; None: the model's default (True)."""
    dimensions: int | None = None
    """Keep the first `dimensions` values (Matryoshka); only for a model that declares it was
    trained so (`is_matryoshka` / `matryoshka_dimensions` in its config.json), as in vLLM."""
    truncate_prompt_tokens: int | None = None
    """Keep only the prompt's last k tokens; -1: the last max_model_len (vLLM's)."""

    def __post_init__(self) -> None:
        if self.pooling_type is not None:
            if not isinstance(self.pooling_type, str) or (
                self.pooling_type.upper() not in POOLING_TYPES
            ):
                _fail(
                    f"pooling_type must be one of {', '.join(POOLING_TYPES)}; "
                    f"got {self.pooling_type!r}",
                    "pooling_type",
                )
            object.__setattr__(self, "pooling_type", self.pooling_type.upper())
        if self.dimensions is not None and not 1 <= self.dimensions <= MAX_INT32:
            _fail(f"dimensions must be at least 1, got {self.dimensions}", "dimensions")
        truncate = self.truncate_prompt_tokens
        if truncate is not None and (truncate == 0 or not -1 <= truncate <= MAX_INT32):
            _fail(
                f"truncate_prompt_tokens must be -1 (the context length) or at least 1, "
                f"got {truncate}",
                "truncate_prompt_tokens",
            )

    def with_defaults(self, pooling_type: str, normalize: bool) -> PoolingParams:
        """These params with their None fields resolved."""
        return replace(
            self,
            pooling_type=self.pooling_type or pooling_type,
            normalize=normalize if self.normalize is None else self.normalize,
        )

    def pooled_positions(self, num_prompt_tokens: int) -> tuple[int, int]:
        """[first, end) of the prompt positions this pooling reads (resolved params only)."""
        if self.pooling_type == "MEAN":
            return 0, num_prompt_tokens
        if self.pooling_type == "CLS":
            return 0, 1
        assert self.pooling_type == "LAST", "pooling params are resolved before they run"
        return num_prompt_tokens - 1, num_prompt_tokens


def _fail(message: str, param: str) -> NoReturn:
    raise InvalidRequestError(message, param=param)
