"""How to sample a request's tokens; validated at construction so bad input fails before it
queues."""

from __future__ import annotations

import enum
import json as _json
from dataclasses import dataclass, field, fields
from typing import Any, NoReturn

from pagedock.errors import InvalidRequestError
from pagedock.limits import (
    MAX_CHOICES,
    MAX_INT32,
    MAX_LOGPROBS,
    MAX_N,
    MAX_SCHEMA_PROPERTIES,
    MAX_STOP_STRING_CHARS,
    MAX_STOP_STRINGS,
    MAX_STRUCTURED_OUTPUT_CHARS,
    MAX_STRUCTURED_OUTPUT_DEPTH,
    MAX_TOKEN_ID_LIST,
    SEED_MAX,
    SEED_MIN,
)

# Below this, a temperature is treated as greedy (as vLLM does): dividing logits by ~0 overflows.
_GREEDY_EPS = 1e-5


class RequestOutputKind(enum.Enum):
    """What each RequestOutput of a request carries (vLLM's names); see
    engine/runtime/outputs.py."""

    CUMULATIVE = 0
    """Every output: the whole completion so far (a copy per step: O(length) each)."""
    DELTA = 1
    """Every output: only what this step added; the outputs concatenate to the whole."""
    FINAL_ONLY = 2
    """One output, when the request finishes, with the whole completion."""


@dataclass
class StructuredOutputsParams:
    """A constraint the sampler enforces on the generated text (vLLM's names). Exactly one of
    `json`, `regex`, `choice`, `grammar`, `json_object` is set; docs/structured-outputs.md."""

    json: dict[str, Any] | str | None = None
    """A JSON schema (a dict, or its JSON text): the output is a JSON value it validates."""
    regex: str | None = None
    """A regular expression the whole output matches."""
    choice: list[str] | None = None
    """The output is exactly one of these strings."""
    grammar: str | None = None
    """A context-free grammar in EBNF (GBNF / Lark-like, as the grammar library reads it)."""
    json_object: bool = False
    """The output is any JSON object (OpenAI's response_format json_object)."""

    def __post_init__(self) -> None:
        if isinstance(self.json, str):
            self.json = _parse_schema_text(self.json)
        set_fields = [f.name for f in fields(self) if _is_set(getattr(self, f.name))]
        if len(set_fields) != 1:
            names = "json, regex, choice, grammar, json_object"
            given = ", ".join(set_fields) or "none"
            _fail(f"structured outputs take exactly one of {names}; got {given}", _PARAM)
        self._validate_values()

    def _validate_values(self) -> None:
        if self.json is not None and not isinstance(self.json, dict):
            _fail("structured_outputs.json must be a JSON schema object", _PARAM)
        if self.json is not None and _nesting_depth(self.json) > MAX_STRUCTURED_OUTPUT_DEPTH:
            _fail_too_deep()
        if self.json is not None and (count := _num_properties(self.json)) > MAX_SCHEMA_PROPERTIES:
            _fail(
                f"the structured-outputs JSON schema has {count} properties; at most "
                f"{MAX_SCHEMA_PROPERTIES} are accepted (compiling grows with their cube)",
                _PARAM,
            )
        if self.choice is not None:
            if not self.choice or len(self.choice) > MAX_CHOICES:
                _fail(f"structured_outputs.choice takes 1 to {MAX_CHOICES} strings", _PARAM)
            if not all(isinstance(c, str) and c for c in self.choice):
                _fail("structured_outputs.choice entries must be non-empty strings", _PARAM)
        for name in ("regex", "grammar"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                _fail(f"structured_outputs.{name} must be a non-empty string", _PARAM)
        try:
            size = self.size_chars
        except (TypeError, ValueError) as e:  # a dict schema holding something JSON can't hold
            _fail(f"structured_outputs.json is not JSON-serialisable: {e}", _PARAM)
        if size > MAX_STRUCTURED_OUTPUT_CHARS:
            _fail(
                f"the structured-outputs constraint has {size} characters; at most "
                f"{MAX_STRUCTURED_OUTPUT_CHARS} are accepted",
                _PARAM,
            )

    @property
    def kind(self) -> str:
        """Which constraint is set: json, regex, choice, grammar or json_object."""
        return next(f.name for f in fields(self) if _is_set(getattr(self, f.name)))

    @property
    def key(self) -> tuple[str, str]:
        """(kind, canonical text): equal constraints have equal keys (the compile cache's key)."""
        kind = self.kind
        if kind == "json":
            return kind, _json.dumps(self.json, sort_keys=True, separators=(",", ":"))
        if kind == "choice":
            return kind, _json.dumps(self.choice)
        if kind == "json_object":
            return kind, ""
        return kind, str(getattr(self, kind))

    @property
    def size_chars(self) -> int:
        return len(self.key[1])


_PARAM = "structured_outputs"


def _is_set(value: object) -> bool:
    return value is not None and value is not False


def _parse_schema_text(text: str) -> Any:
    if len(text) > MAX_STRUCTURED_OUTPUT_CHARS:
        _fail(
            f"the JSON schema has {len(text)} characters; at most "
            f"{MAX_STRUCTURED_OUTPUT_CHARS} are accepted",
            _PARAM,
        )
    try:
        return _json.loads(text)
    except _json.JSONDecodeError as e:
        _fail(f"structured_outputs.json is not valid JSON: {e}", _PARAM)
    except RecursionError:  # nested deeper than the parser's stack: far past the limit
        _fail_too_deep()


def _nesting_depth(value: object) -> int:
    """Levels of nested dicts and lists in a JSON value (0 for a scalar), counted level by level
    without recursion, and no further than one past MAX_STRUCTURED_OUTPUT_DEPTH."""
    depth, level = 0, [value]
    while depth <= MAX_STRUCTURED_OUTPUT_DEPTH:
        containers = [v for v in level if isinstance(v, (dict, list))]
        if not containers:
            break
        depth += 1
        level = [c for v in containers for c in (v.values() if isinstance(v, dict) else v)]
    return depth


def _num_properties(schema: object) -> int:
    """Entries of every `properties` object in a schema (nested ones too), without recursion."""
    count, pending = 0, [schema]
    while pending:
        value = pending.pop()
        if isinstance(value, dict):
            properties = value.get("properties")
            count += len(properties) if isinstance(properties, dict) else 0
            pending.extend(value.values())
        elif isinstance(value, list):
            pending.extend(value)
    return count


def _fail_too_deep() -> NoReturn:
    _fail(
        "the structured-outputs JSON schema is nested too deeply: at most "
        f"{MAX_STRUCTURED_OUTPUT_DEPTH} levels of objects and arrays are accepted",
        _PARAM,
    )


@dataclass
class SamplingParams:
    """Sampling parameters of one request, with the names OpenAI's and vLLM's APIs use."""

    max_tokens: int | None = 16
    """Tokens to generate at most; None = up to the model's context length."""
    temperature: float = 1.0
    """0 = greedy. Higher flattens the distribution."""
    top_p: float = 1.0
    """Nucleus sampling: keep the smallest set of tokens whose probability reaches top_p, in
    (0, 1]."""
    top_k: int = 0
    """Keep the k most likely tokens; 0 or -1 = all."""
    min_p: float = 0.0
    """Drop tokens whose probability is below min_p times the most likely token's, in [0, 1]."""
    seed: int | None = None
    """Per-request seed: the same seed and prompt give the same tokens, whatever else is batched."""
    stop: list[str] = field(default_factory=list)
    """Strings that end generation; not included in the output."""
    stop_token_ids: list[int] = field(default_factory=list)
    """Token ids that end generation (in addition to the model's end-of-sequence tokens)."""
    ignore_eos: bool = False
    """Keep generating past the end-of-sequence token (benchmarks)."""
    min_tokens: int = 0
    """End-of-sequence and stop tokens are suppressed until this many tokens are generated."""
    presence_penalty: float = 0.0
    """Subtracted once from the logit of every token already generated, in [-2, 2]."""
    frequency_penalty: float = 0.0
    """Subtracted from a token's logit per occurrence in the output, in [-2, 2]."""
    repetition_penalty: float = 1.0
    """Divides positive / multiplies negative logits of tokens seen in prompt or output; > 0."""
    logprobs: int | None = None
    """Return the sampled token's log-probability and this many top alternatives (0..20)."""
    prompt_logprobs: int | None = None
    """Return each prompt token's log-probability (the first has none) and this many top
    alternatives per position (0..20), computed in the prefill's forward pass (vLLM's)."""
    n: int = 1
    """Completions per prompt; they share the prompt's KV blocks."""
    skip_special_tokens: bool = True
    """Leave special tokens out of the returned text."""
    include_stop_str_in_output: bool = False
    """Keep the matched stop string at the end of the text."""
    output_kind: RequestOutputKind = RequestOutputKind.CUMULATIVE
    """What each output carries. `LLM.generate` uses FINAL_ONLY, the HTTP server DELTA; the
    default is for callers of `LLMEngine.step()` that want a snapshot per step."""
    structured_outputs: StructuredOutputsParams | None = None
    """Constrain the output to a JSON schema, regex, choice or grammar (guided decoding)."""

    def __post_init__(self) -> None:
        self._validate()
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        if self.top_k == -1:
            self.top_k = 0

    def _validate(self) -> None:
        self._validate_lengths()
        self._validate_distribution()
        self._validate_penalties()
        self._validate_lists()
        so = self.structured_outputs
        if so is not None and not isinstance(so, StructuredOutputsParams):
            _fail("structured_outputs must be a StructuredOutputsParams", _PARAM)
        if self.logprobs is not None and not 0 <= self.logprobs <= MAX_LOGPROBS:
            _fail(f"logprobs must be in [0, {MAX_LOGPROBS}], got {self.logprobs}", "logprobs")
        if self.prompt_logprobs is not None and not 0 <= self.prompt_logprobs <= MAX_LOGPROBS:
            _fail(
                f"prompt_logprobs must be in [0, {MAX_LOGPROBS}], got {self.prompt_logprobs}",
                "prompt_logprobs",
            )
        if not 1 <= self.n <= MAX_N:
            _fail(f"n must be in [1, {MAX_N}], got {self.n}", "n")
        if self.seed is not None and not SEED_MIN <= self.seed <= SEED_MAX:
            _fail(f"seed must be in [{SEED_MIN}, {SEED_MAX}], got {self.seed}", "seed")

    def _validate_lengths(self) -> None:
        if self.max_tokens is not None and not 1 <= self.max_tokens <= MAX_INT32:
            _fail(
                f"max_tokens must be at least 1 and at most {MAX_INT32}, got {self.max_tokens}",
                "max_tokens",
            )
        if not 0 <= self.min_tokens <= MAX_INT32:
            _fail(
                f"min_tokens must be non-negative and at most {MAX_INT32}, got {self.min_tokens}",
                "min_tokens",
            )
        if self.max_tokens is not None and self.min_tokens > self.max_tokens:
            _fail(
                f"min_tokens ({self.min_tokens}) must not exceed max_tokens ({self.max_tokens})",
                "min_tokens",
            )

    def _validate_distribution(self) -> None:
        if self.temperature < 0:
            _fail(f"temperature must be non-negative, got {self.temperature}", "temperature")
        if not 0.0 < self.top_p <= 1.0:
            _fail(f"top_p must be in (0, 1], got {self.top_p}", "top_p")
        # Above the vocabulary is fine (the sampler clamps k to it); above int32 is no use to
        # anyone.
        if not -1 <= self.top_k <= MAX_INT32:
            _fail(f"top_k must be -1 (disable) or in [1, {MAX_INT32}], got {self.top_k}", "top_k")
        if not 0.0 <= self.min_p <= 1.0:
            _fail(f"min_p must be in [0, 1], got {self.min_p}", "min_p")

    def _validate_penalties(self) -> None:
        for name in ("presence_penalty", "frequency_penalty"):
            value = getattr(self, name)
            if not -2.0 <= value <= 2.0:
                _fail(f"{name} must be in [-2, 2], got {value}", name)
        if self.repetition_penalty <= 0:
            _fail(
                f"repetition_penalty must be positive, got {self.repetition_penalty}",
                "repetition_penalty",
            )

    def _validate_lists(self) -> None:
        """Sizes, and ids within int32; ids within the model's vocabulary are the engine's check
        (InputProcessor.process), the only place that knows the vocabulary."""
        stop = [self.stop] if isinstance(self.stop, str) else self.stop
        if len(stop) > MAX_STOP_STRINGS:
            _fail(f"at most {MAX_STOP_STRINGS} stop strings, got {len(stop)}", "stop")
        if any(not s for s in stop):
            _fail("stop strings must be non-empty", "stop")
        if any(len(s) > MAX_STOP_STRING_CHARS for s in stop):
            _fail(f"stop strings must be at most {MAX_STOP_STRING_CHARS} characters", "stop")
        ids = self.stop_token_ids
        if len(ids) > MAX_TOKEN_ID_LIST:
            _fail(f"at most {MAX_TOKEN_ID_LIST} stop_token_ids, got {len(ids)}", "stop_token_ids")
        if any(not 0 <= t <= MAX_INT32 for t in ids):
            _fail(f"stop_token_ids must be in [0, {MAX_INT32}]", "stop_token_ids")

    @property
    def is_greedy(self) -> bool:
        return self.temperature < _GREEDY_EPS

    @property
    def has_penalties(self) -> bool:
        return (
            self.presence_penalty != 0.0
            or self.frequency_penalty != 0.0
            or self.repetition_penalty != 1.0
        )


def _fail(message: str, param: str) -> NoReturn:
    raise InvalidRequestError(message, param=param)
