"""PoolerConfig: what a served model says about its embeddings (vLLM's name): the pooling and
normalization an embedding request gets when it names none, and whether `dimensions` may shorten
its vectors (Matryoshka).

A generative model served for embeddings pools its LAST position and normalizes, as vLLM's
default for one. A sentence-transformers model directory says otherwise in its own files, read as
vLLM reads them: `modules.json` lists a Pooling module (whose `config.json` names the mode:
`pooling_mode_lasttoken`, `pooling_mode_mean_tokens`, `pooling_mode_cls_token`) and, when the
vectors are unit-length, a Normalize module. `dimensions` is accepted only from a model whose
config.json declares `is_matryoshka` or `matryoshka_dimensions`: truncating another model's
vector gives poor embeddings, so vLLM refuses it, and so does pagedock.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_ST_POOLING = "sentence_transformers.models.Pooling"
_ST_NORMALIZE = "sentence_transformers.models.Normalize"
_ST_MODES = (
    ("pooling_mode_lasttoken", "LAST"),
    ("pooling_mode_mean_tokens", "MEAN"),
    ("pooling_mode_cls_token", "CLS"),
)


@dataclass(frozen=True)
class PoolerConfig:
    """The model's embedding defaults and what `dimensions` may be."""

    pooling_type: str = "LAST"
    """The pooling of a request that names none."""
    normalize: bool = True
    """Whether a request that does not say is normalized."""
    hidden_size: int = 0
    """The length of a full embedding (0: not checked)."""
    is_matryoshka: bool = False
    """The model was trained so that a prefix of its vector is an embedding too."""
    matryoshka_dimensions: tuple[int, ...] = ()
    """The prefix lengths it was trained for; empty: any."""

    def dimensions_error(self, dimensions: int) -> str | None:
        """Why `dimensions` cannot be asked of this model; None when it can."""
        if not self.is_matryoshka:
            return (
                "this model does not support Matryoshka representation (its config.json "
                "declares neither is_matryoshka nor matryoshka_dimensions): changing its output "
                "dimensions would give poor embeddings"
            )
        if self.matryoshka_dimensions and dimensions not in self.matryoshka_dimensions:
            allowed = ", ".join(str(d) for d in self.matryoshka_dimensions)
            return f"dimensions must be one of this model's Matryoshka dimensions: {allowed}"
        if self.hidden_size and dimensions > self.hidden_size:
            return f"dimensions must be at most the model's hidden size, {self.hidden_size}"
        return None


def read_pooler_config(model_path: Path, hidden_size: int) -> PoolerConfig:
    """The defaults a model's directory declares (a GGUF file declares none: LAST, normalized)."""
    if not model_path.is_dir():
        return PoolerConfig(hidden_size=hidden_size)
    config = _read_json(model_path / "config.json")
    dims = config.get("matryoshka_dimensions")
    dimensions = tuple(int(d) for d in dims) if isinstance(dims, list) else ()
    pooling_type, normalize = _sentence_transformers_pooling(model_path)
    return PoolerConfig(
        pooling_type=pooling_type,
        normalize=normalize,
        hidden_size=hidden_size,
        is_matryoshka=bool(config.get("is_matryoshka")) or bool(dimensions),
        matryoshka_dimensions=dimensions,
    )


def _sentence_transformers_pooling(model_path: Path) -> tuple[str, bool]:
    """(pooling type, normalize) from a sentence-transformers model's modules; (LAST, True)
    without them."""
    modules = _read_json(model_path / "modules.json", default=[])
    if not isinstance(modules, list) or not modules:
        return "LAST", True
    kinds = {m.get("type"): m.get("path", "") for m in modules if isinstance(m, dict)}
    pooling_type = "LAST"
    if _ST_POOLING in kinds:
        pooling = _read_json(model_path / str(kinds[_ST_POOLING]) / "config.json")
        pooling_type = next((kind for key, kind in _ST_MODES if pooling.get(key)), "LAST")
    return pooling_type, _ST_NORMALIZE in kinds


def _read_json(path: Path, default: Any = None) -> Any:
    """A JSON file's value; `default` (an empty dict when None) if it is missing or unreadable."""
    fallback = {} if default is None else default
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return fallback
    return value if isinstance(value, type(fallback)) else fallback
