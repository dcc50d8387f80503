"""pagedock's inference engine.

Importing `engine` is cheap and torch-free: the router and the operator import the shared,
torch-free modules (`engine.core.block_hash`, `engine.errors`, ...) without pulling in torch. The heavy
names below are resolved lazily on first use.
"""

from typing import TYPE_CHECKING, Any

__all__ = ["LLM", "LLMEngine", "RequestOutput", "SamplingParams", "StructuredOutputsParams"]

_LAZY = {
    "LLM": "engine.llm",
    "LLMEngine": "engine.llm_engine",
    "RequestOutput": "engine.outputs",
    "SamplingParams": "engine.sampling_params",
    "StructuredOutputsParams": "engine.sampling_params",
}

if TYPE_CHECKING:
    from engine.llm import LLM
    from engine.llm_engine import LLMEngine
    from engine.outputs import RequestOutput
    from engine.sampling_params import SamplingParams, StructuredOutputsParams


def __getattr__(name: str) -> Any:
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module 'engine' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module_name), name)
