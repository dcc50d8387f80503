"""EngineRequest: one request as the engine takes it in, validated and resolved (vLLM v1's
EngineCoreRequest). The InputProcessor (engine/inputs/input_processor.py) is the only thing that
makes one from a prompt and its params; the engine queues it (`LLMEngine.add_engine_request`) as a
scheduler Request (`Request.from_engine_request`), and the render endpoints answer with it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.inputs.pooling_params import PoolingParams
from engine.inputs.sampling_params import SamplingParams
from pagedock.errors import InvalidRequestError
from pagedock.tenancy.tenants import DEFAULT_TENANT_NAME

DEFAULT_TENANT = DEFAULT_TENANT_NAME
"""The tenant of a request nobody named one for (offline, or a server without tenants)."""


@dataclass(frozen=True)
class AdapterRef:
    """A LoRA adapter a request asks for: its name, and optionally where its weights are.

    The engine serves the adapters it loaded at start (EngineConfig.lora_modules, name=path) or
    since (`LLMEngine.add_lora`); the InputProcessor refuses a request for any other
    (UnknownAdapterError), or for one at another path, and every request when LoRA is off,
    rather than run it on the base model. An empty
    `path` names the adapter by name alone (docs/lora.md)."""

    name: str
    path: str = ""


class UnknownAdapterError(InvalidRequestError):
    """A request, or an unload, names a LoRA adapter the engine does not serve (never loaded, or
    unloaded): the server's 404 `model_not_found`."""


class LoRARequest(AdapterRef):
    """vLLM's `LoRARequest(lora_name, lora_int_id, lora_path)`, for code written against vLLM:
    an AdapterRef by another name. pagedock knows adapters by name; the id is kept, not used."""

    lora_int_id: int

    def __init__(self, lora_name: str, lora_int_id: int = 0, lora_path: str = "") -> None:
        super().__init__(lora_name, lora_path)
        object.__setattr__(self, "lora_int_id", lora_int_id)

    @property
    def lora_name(self) -> str:
        return self.name

    @property
    def lora_path(self) -> str:
        return self.path


@dataclass(frozen=True, kw_only=True)
class EngineRequest:
    """A validated request. Built by the InputProcessor only: every field is checked there."""

    request_id: str
    prompt_token_ids: list[int]
    """In the vocabulary, not empty, short enough to leave room to generate."""
    sampling_params: SamplingParams
    """The request's params, `max_tokens` resolved: the one value the engine runs by, never None
    (the params' own None means "up to the context length")."""
    arrival_time: float
    """When the request arrived (time.monotonic())."""
    prompt: str | None = None
    """The text the ids were made from, for the outputs and the request log; None for ids only."""
    prior_output_token_ids: list[int] = field(default_factory=list)
    """A continuation's tokens generated before, elsewhere (engine/inputs/continuation.py)."""
    grammar: object | None = None
    """The structured-outputs constraint compiled ahead (GuidedDecoding.submit, off the engine
    thread); None when unguided, or when the engine is to compile `sampling_params`' constraint
    itself as it adds the request (the offline path). Tools need nothing here: a forced tool call
    reaches the engine as a structured-outputs constraint."""
    grammar_compile: tuple[float, float] | None = None
    """When `grammar` was waited for (time.monotonic() start, end: a cached one takes no time),
    for the request's trace; None when it was not compiled ahead."""
    priority: int = 0
    """Lower is scheduled first."""
    lora_request: AdapterRef | None = None
    """The LoRA adapter to run with, one the engine serves; None: the base model."""
    cache_salt: str | None = None
    """vLLM's: its prefix-cache blocks are shared only with requests of the same salt (and
    adapter) (pagedock/kv/block_hash.py); None: with every unsalted request."""
    tenant: str = DEFAULT_TENANT
    """Who it belongs to: the waiting queue shares the engine fairly between tenants
    (engine/core/fair_queue.py); a bounded set of names (the server's tenants file, or at most
    64 a router named)."""
    pooling_params: PoolingParams | None = None
    """An embedding request's pooling, resolved (InputProcessor.process_pooling): it runs its
    prompt, returns the pooled hidden states and samples nothing (`sampling_params` is then
    POOLING_SAMPLING, one token that is never sampled); None: a generation request."""

    @property
    def max_tokens(self) -> int:
        """The resolved max_tokens (prior output tokens count towards it)."""
        assert self.sampling_params.max_tokens is not None, "max_tokens is resolved"
        return self.sampling_params.max_tokens
