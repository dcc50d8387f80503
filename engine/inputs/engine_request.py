"""EngineRequest: one request as the engine takes it in, validated and resolved (vLLM v1's
EngineCoreRequest). The InputProcessor (engine/inputs/input_processor.py) is the only thing that
makes one from a prompt and its params; the engine queues it (`LLMEngine.add_engine_request`) as a
scheduler Request (`Request.from_engine_request`), and the render endpoints answer with it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.inputs.sampling_params import SamplingParams


@dataclass(frozen=True)
class AdapterRef:
    """A LoRA adapter a request asks for: a name and where its weights are.

    Reserved for the LoRA issue: no adapter can be served yet, and the InputProcessor refuses a
    request that names one (InvalidRequestError) rather than run it on the base model."""

    name: str
    path: str


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
    priority: int = 0
    """Lower is scheduled first."""
    lora_request: AdapterRef | None = None
    """Reserved for LoRA (not supported yet: the InputProcessor refuses one)."""

    @property
    def max_tokens(self) -> int:
        """The resolved max_tokens (prior output tokens count towards it)."""
        assert self.sampling_params.max_tokens is not None, "max_tokens is resolved"
        return self.sampling_params.max_tokens
