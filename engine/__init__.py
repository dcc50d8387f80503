"""pagedock's inference engine.

Importing `engine` is cheap and torch-free (the lower modules it starts from are: config, inputs,
core); the public names below, vLLM's (`from engine import LLM, SamplingParams`), are resolved
lazily on first use. The router and the operator import nothing of it: what they share with the
engine is the foundation, `pagedock/`.
"""

from typing import TYPE_CHECKING, Any

__all__ = [
    "LLM",
    "LLMEngine",
    "LoRARequest",
    "PoolingParams",
    "RequestOutput",
    "SamplingParams",
    "StructuredOutputsParams",
]

_LAZY = {
    "LLM": "engine.runtime.llm",
    "LLMEngine": "engine.runtime.llm_engine",
    "LoRARequest": "engine.inputs.engine_request",
    "PoolingParams": "engine.inputs.pooling_params",
    "RequestOutput": "engine.runtime.outputs",
    "SamplingParams": "engine.inputs.sampling_params",
    "StructuredOutputsParams": "engine.inputs.sampling_params",
}

if TYPE_CHECKING:
    from engine.inputs.engine_request import LoRARequest
    from engine.inputs.pooling_params import PoolingParams
    from engine.inputs.sampling_params import SamplingParams, StructuredOutputsParams
    from engine.runtime.llm import LLM
    from engine.runtime.llm_engine import LLMEngine
    from engine.runtime.outputs import RequestOutput


def __getattr__(name: str) -> Any:
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module 'engine' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module_name), name)
