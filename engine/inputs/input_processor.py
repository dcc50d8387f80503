"""InputProcessor: a prompt and its params in, one validated EngineRequest out (vLLM v1's input
processor). The only place a request is checked against the model: every way in (LLM, LLMEngine,
AsyncEngine and its engine loop, the server's render endpoints) goes through `process`, so
rendering refuses exactly what generation refuses, with the same errors.

What SamplingParams checks on its own (ranges, sizes) needs no model and stays there; what needs
the model's vocabulary, context length or tokenizer is here. Torch-free and stateless after
construction, so any thread may call it (the server renders on its prompt pool).
"""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from engine.inputs.continuation import check_continuation
from engine.inputs.engine_request import (
    DEFAULT_TENANT,
    AdapterRef,
    EngineRequest,
    UnknownAdapterError,
)
from engine.inputs.pooler_config import PoolerConfig
from engine.inputs.pooling_params import PoolingParams
from engine.inputs.sampling_params import RequestOutputKind, SamplingParams
from pagedock.errors import InvalidRequestError, PromptTooLongError
from pagedock.limits import MAX_CACHE_SALT_CHARS

if TYPE_CHECKING:
    from pagedock.text.tokenizer import Tokenizer


class InputProcessor:
    """Built once per engine with what the checks need to know of the model."""

    def __init__(
        self,
        tokenizer: Tokenizer | None,
        vocab_size: int,
        max_model_len: int,
        lora_modules: Mapping[str, str] | None = None,
        pooler_config: PoolerConfig | None = None,
    ) -> None:
        """`lora_modules`: the LoRA adapters the engine serves, {name: path}, read at each check
        (the engine's LoRARegistry: adapters come and go while it runs); None when LoRA is
        off. `pooler_config`: the model's embedding defaults (None: LAST, normalized, no
        Matryoshka)."""
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size
        self.max_model_len = max_model_len
        self.lora_modules = lora_modules
        self.pooler_config = pooler_config or PoolerConfig()

    def process(
        self,
        request_id: str,
        prompt: str | Sequence[int],
        params: SamplingParams | None = None,
        *,
        prompt_text: str | None = None,
        priority: int = 0,
        arrival_time: float | None = None,
        prior_output_token_ids: Sequence[int] = (),
        grammar: object | None = None,
        grammar_compile: tuple[float, float] | None = None,
        lora_request: AdapterRef | None = None,
        cache_salt: str | None = None,
        tenant: str = DEFAULT_TENANT,
    ) -> EngineRequest:
        """Check the request and resolve it; InvalidRequestError (PromptTooLongError when it
        cannot fit the context) for anything the engine would refuse.

        `prompt`: text (tokenized here) or token ids; `prompt_text`: for ids, the text they were
        made from (kept for the outputs). `prior_output_token_ids`: a continuation. `grammar`:
        the params' constraint compiled ahead, or None (engine/inputs/engine_request.py), and
        `grammar_compile` when it was waited for.
        `cache_salt`: vLLM's, a non-empty string of at most MAX_CACHE_SALT_CHARS. `tenant`: who
        it belongs to (fair sharing)."""
        params = params or SamplingParams()
        self.check_adapter(lora_request)
        _check_cache_salt(cache_salt)
        text, token_ids = self._prompt_ids(prompt)
        _check_stop_token_ids(params, self.vocab_size)
        max_tokens = _resolve_max_tokens(len(token_ids), params, self.max_model_len)
        # max_tokens fits the context: it is all the room there is to generate
        prior = check_continuation(prior_output_token_ids, params, self.vocab_size, max_tokens)
        if params.stop and self.tokenizer is None:
            raise InvalidRequestError("stop strings need a tokenizer; this model has none", "stop")
        return EngineRequest(
            request_id=request_id,
            prompt_token_ids=token_ids,
            sampling_params=_with_max_tokens(params, max_tokens),
            arrival_time=time.monotonic() if arrival_time is None else arrival_time,
            prompt=text if text is not None else prompt_text,
            prior_output_token_ids=prior,
            grammar=grammar,
            grammar_compile=grammar_compile,
            priority=priority,
            lora_request=lora_request,
            cache_salt=cache_salt,
            tenant=tenant,
        )

    def process_pooling(
        self,
        request_id: str,
        prompt: str | Sequence[int],
        params: PoolingParams | None = None,
        *,
        prompt_text: str | None = None,
        priority: int = 0,
        arrival_time: float | None = None,
        lora_request: AdapterRef | None = None,
        cache_salt: str | None = None,
        tenant: str = DEFAULT_TENANT,
    ) -> EngineRequest:
        """An embedding request checked and resolved (engine/inputs/pooling_params.py): the
        model's pooling and normalization where it names none, its prompt cut to its last
        `truncate_prompt_tokens`, at most max_model_len tokens (PromptTooLongError: nothing is
        generated, so the whole context is the prompt's), `dimensions` only where the model
        declares Matryoshka support. The other arguments are `process`'s."""
        params = params or PoolingParams()
        self.check_adapter(lora_request)
        _check_cache_salt(cache_salt)
        text, token_ids = self._prompt_ids(prompt)
        token_ids = self._truncated(token_ids, params.truncate_prompt_tokens)
        if len(token_ids) > self.max_model_len:
            raise PromptTooLongError(
                f"this model's maximum context length is {self.max_model_len} tokens, but the "
                f"input has {len(token_ids)} tokens; shorten it, or set truncate_prompt_tokens",
                "input",
            )
        config = self.pooler_config
        why = None if params.dimensions is None else config.dimensions_error(params.dimensions)
        if why is not None:
            raise InvalidRequestError(why, "dimensions")
        return EngineRequest(
            request_id=request_id,
            prompt_token_ids=token_ids,
            sampling_params=pooling_sampling_params(),
            arrival_time=time.monotonic() if arrival_time is None else arrival_time,
            prompt=text if text is not None else prompt_text,
            priority=priority,
            lora_request=lora_request,
            cache_salt=cache_salt,
            tenant=tenant,
            pooling_params=params.with_defaults(config.pooling_type, config.normalize),
        )

    def _truncated(self, token_ids: list[int], truncate_prompt_tokens: int | None) -> list[int]:
        """The prompt's last `truncate_prompt_tokens` (-1: max_model_len) tokens, as vLLM's."""
        if truncate_prompt_tokens is None:
            return token_ids
        if truncate_prompt_tokens > self.max_model_len:
            raise InvalidRequestError(
                f"truncate_prompt_tokens ({truncate_prompt_tokens}) is greater than this model's "
                f"maximum context length ({self.max_model_len})",
                "truncate_prompt_tokens",
            )
        keep = self.max_model_len if truncate_prompt_tokens == -1 else truncate_prompt_tokens
        return token_ids[-keep:]

    def check_adapter(self, lora_request: AdapterRef | None) -> None:
        """A request for an adapter runs with that adapter or not at all: never on the base
        model, nor on another adapter's weights. The engine checks again as it queues the
        request: the adapter may have been unloaded since."""
        if lora_request is None:
            return
        name = lora_request.name
        if self.lora_modules is None:
            raise InvalidRequestError(
                f"the request asks for LoRA adapter {name!r}, but LoRA is off on this engine "
                "(start it with enable_lora, --enable-lora)",
                "lora_request",
            )
        path = self.lora_modules.get(name)
        if path is None:
            known = ", ".join(repr(n) for n in self.lora_modules) or "none"
            raise UnknownAdapterError(
                f"unknown LoRA adapter {name!r}; this engine serves: {known}", "lora_request"
            )
        if lora_request.path and not same_path(lora_request.path, path):
            raise InvalidRequestError(
                f"LoRA adapter {name!r} is served from {path}, not {lora_request.path}",
                "lora_request",
            )

    def _prompt_ids(self, prompt: str | Sequence[int]) -> tuple[str | None, list[int]]:
        """(text, token ids): a text prompt tokenized, ids checked against the vocabulary."""
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise InvalidRequestError("this model has no tokenizer: pass token ids", "prompt")
            if not prompt:
                raise InvalidRequestError("the prompt is empty", "prompt")
            return prompt, self.tokenizer.encode(prompt)
        token_ids = list(prompt)
        _check_prompt_ids(token_ids, self.vocab_size)
        return None, token_ids


def pooling_sampling_params() -> SamplingParams:
    """What an embedding request carries as sampling params: one token, never sampled (its
    `do_sample` is always false), and one output, when it finishes."""
    return SamplingParams(max_tokens=1, output_kind=RequestOutputKind.FINAL_ONLY)


def same_path(a: str, b: str) -> bool:
    """Whether two spellings of a local path name the same place (~ and relative paths
    resolved)."""
    return os.path.abspath(os.path.expanduser(a)) == os.path.abspath(os.path.expanduser(b))


def _check_prompt_ids(token_ids: list[int], vocab_size: int) -> None:
    if not token_ids:
        raise InvalidRequestError("the prompt is empty", "prompt")
    bad = [t for t in token_ids if not isinstance(t, int) or not 0 <= t < vocab_size]
    if bad:
        raise InvalidRequestError(
            f"token ids must be integers in [0, {vocab_size}); got {bad[:5]}", "prompt"
        )


def _check_cache_salt(cache_salt: str | None) -> None:
    """The HTTP models check the same (pagedock/protocol/openai.py); this holds for the offline
    API too."""
    if cache_salt is None:
        return
    if not isinstance(cache_salt, str) or not 0 < len(cache_salt) <= MAX_CACHE_SALT_CHARS:
        raise InvalidRequestError(
            f"cache_salt must be a non-empty string of at most {MAX_CACHE_SALT_CHARS} characters",
            "cache_salt",
        )
    try:  # it is published in vLLM-format KV events (msgpack): it must be UTF-8
        cache_salt.encode()
    except UnicodeEncodeError:
        raise InvalidRequestError("cache_salt must be valid Unicode", "cache_salt") from None


def _check_stop_token_ids(params: SamplingParams, vocab_size: int) -> None:
    """Ids the sampler indexes logits with must lie in the vocabulary, which only the engine
    knows: past it, one request's ban would fail the whole step's sampling."""
    bad = [t for t in params.stop_token_ids if not 0 <= t < vocab_size]
    if bad:
        raise InvalidRequestError(
            f"stop_token_ids must be in [0, {vocab_size}); got {bad[:5]}", "stop_token_ids"
        )


def _resolve_max_tokens(num_prompt_tokens: int, params: SamplingParams, max_model_len: int) -> int:
    """The resolved max_tokens; PromptTooLongError when prompt + max_tokens can't fit."""
    if num_prompt_tokens >= max_model_len:
        raise PromptTooLongError(
            f"the prompt has {num_prompt_tokens} tokens; this model's maximum context length "
            f"is {max_model_len} tokens, leaving no room to generate",
            "prompt",
        )
    if params.max_tokens is None:
        return max_model_len - num_prompt_tokens
    if num_prompt_tokens + params.max_tokens > max_model_len:
        raise PromptTooLongError(
            f"this model's maximum context length is {max_model_len} tokens, but "
            f"{num_prompt_tokens + params.max_tokens} were requested "
            f"({num_prompt_tokens} in the prompt, {params.max_tokens} to generate)",
            "max_tokens",
        )
    return params.max_tokens


def _with_max_tokens(params: SamplingParams, max_tokens: int) -> SamplingParams:
    """A copy of `params` with max_tokens resolved. Not `dataclasses.replace`: that validates
    again, and `min_tokens` above a max_tokens resolved from None is no error (the context length
    ends the request first, as it always has)."""
    resolved = copy.copy(params)
    resolved.max_tokens = max_tokens
    return resolved
