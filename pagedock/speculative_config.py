"""SpeculativeConfig: speculative decoding's settings, read from vLLM's `--speculative-config`
JSON (engine/config.py's `speculative_config`). Only vLLM's `ngram` method (prompt lookup:
engine/spec_decode/ngram_proposer.py) is served so far. In the foundation, torch-free, so that
what sets the field (the operator's CRD) can read it as the engine will."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pagedock.errors import ConfigError
from pagedock.options import json_object_option

SPECULATIVE_METHODS = ("ngram",)
# The most draft tokens a step may verify per request: beyond it a draft of copied text is rarely
# accepted whole, and each rejected token is a wasted row of the forward pass.
MAX_NUM_SPECULATIVE_TOKENS = 16


@dataclass(frozen=True)
class SpeculativeConfig:
    method: str
    """How drafts are made: ngram (the longest recent n-gram's continuation, earlier in the
    request's own prompt and output)."""
    num_speculative_tokens: int
    """Draft tokens proposed and verified per request and step (at most 16)."""
    prompt_lookup_min: int
    """The shortest suffix n-gram looked up."""
    prompt_lookup_max: int
    """The longest suffix n-gram looked up (tried first)."""

    def __post_init__(self) -> None:
        name = "--speculative-config"
        if self.method not in SPECULATIVE_METHODS:
            raise ConfigError(
                f"{name}: method {self.method!r} is not served; methods: {SPECULATIVE_METHODS}"
            )
        k = self.num_speculative_tokens
        if not 1 <= k <= MAX_NUM_SPECULATIVE_TOKENS:
            raise ConfigError(
                f"{name}: num_speculative_tokens must be in 1..{MAX_NUM_SPECULATIVE_TOKENS}, "
                f"got {k}"
            )
        low, high = self.prompt_lookup_min, self.prompt_lookup_max
        if not 1 <= low <= high:
            raise ConfigError(
                f"{name}: need 1 <= prompt_lookup_min <= prompt_lookup_max, got {low} and {high}"
            )

    @classmethod
    def parse(cls, value: SpeculativeConfig | dict[str, Any] | str) -> SpeculativeConfig:
        """From the JSON text (flag, env var, CRD field) or its dict (the offline `LLM`'s
        argument). prompt_lookup_min and _max default to each other, both to 5 when neither is
        given; method and num_speculative_tokens must be given. ConfigError naming the problem."""
        if isinstance(value, SpeculativeConfig):
            return value
        value = json_object_option(value, "--speculative-config", cls)
        for key in ("method", "num_speculative_tokens"):
            if key not in value:
                raise ConfigError(f"--speculative-config: {key} is required")
        for key, item in value.items():
            if key != "method" and (not isinstance(item, int) or isinstance(item, bool)):
                raise ConfigError(f"--speculative-config: {key} must be an integer, got {item!r}")
        given: dict[str, int] = {k: v for k, v in value.items() if k != "method"}
        low = given.get("prompt_lookup_min", given.get("prompt_lookup_max", 5))
        high = given.get("prompt_lookup_max", low)
        return cls(
            method=value["method"],
            num_speculative_tokens=given["num_speculative_tokens"],
            prompt_lookup_min=low,
            prompt_lookup_max=high,
        )
