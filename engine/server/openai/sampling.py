"""From an OpenAI request to the engine's SamplingParams (which validates the values)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.inputs.sampling_params import SamplingParams
from engine.server.openai.structured_outputs import structured_outputs_of
from engine.tool_calls.chat_tools import ToolCalling, plan_tool_calling
from pagedock.errors import InvalidRequestError
from pagedock.protocol import (
    CONTINUATION_HEADER,
    ChatCompletionRequest,
    CompletionRequest,
    SamplingFields,
)

if TYPE_CHECKING:
    from engine.server.openai.context import ServerOptions


def to_sampling_params(
    request: SamplingFields,
    max_tokens: int | None,
    logprobs: int | None,
    prompt_logprobs: int | None = None,
) -> SamplingParams:
    """`prompt_logprobs`: what the engine computes of the prompt (prompt_logprobs_of says)."""
    unsupported = request.unsupported_field()
    if unsupported is not None:
        raise InvalidRequestError(request.unsupported_message(unsupported), unsupported)
    stop = [request.stop] if isinstance(request.stop, str) else list(request.stop or [])
    return SamplingParams(
        max_tokens=max_tokens,
        temperature=1.0 if request.temperature is None else request.temperature,
        top_p=1.0 if request.top_p is None else request.top_p,
        top_k=0 if request.top_k is None else request.top_k,
        min_p=request.min_p,
        seed=request.seed,
        stop=stop,
        stop_token_ids=list(request.stop_token_ids or []),
        ignore_eos=request.ignore_eos,
        min_tokens=request.min_tokens,
        presence_penalty=request.presence_penalty,
        frequency_penalty=request.frequency_penalty,
        repetition_penalty=request.repetition_penalty,
        logprobs=logprobs,
        prompt_logprobs=prompt_logprobs,
        n=request.n,
        skip_special_tokens=request.skip_special_tokens,
        include_stop_str_in_output=request.include_stop_str_in_output,
        structured_outputs=structured_outputs_of(request),
    )


def chat_sampling_params(
    options: ServerOptions, body: ChatCompletionRequest
) -> tuple[SamplingParams, ToolCalling | None]:
    """A chat request's params, a forced tool call's schema as their structured output, and how
    its tool calls are read back (None: not at all). Chat generation and chat render both read a
    request with this, so that they refuse the same requests."""
    if body.top_logprobs is not None and not body.logprobs:
        raise InvalidRequestError("top_logprobs needs logprobs: true", "top_logprobs")
    logprobs = (body.top_logprobs or 0) if body.logprobs else None
    params = to_sampling_params(
        body, body.resolved_max_tokens, logprobs, asked_prompt_logprobs(body)
    )
    tools = plan_tool_calling(options, body)
    if tools is not None:
        params = tools.guide(params)
    return params, tools


def completion_sampling_params(body: CompletionRequest) -> SamplingParams:
    """A completions request's params: echo with max_tokens 0 generates one token (left out of
    the answer, as vLLM does); echo with logprobs needs the prompt's (vLLM's rule: the
    `prompt_logprobs` field's count, else `logprobs`; the larger when both ask)."""
    if body.max_tokens == 0 and not body.echo:
        raise InvalidRequestError(
            "max_tokens must be at least 1 (0 only with echo, which then returns the prompt alone)",
            "max_tokens",
        )
    max_tokens = 1 if body.echo_without_generation else body.max_tokens
    asked = asked_prompt_logprobs(body)
    echoed = body.logprobs if body.echo and body.continuation is None else None
    prompt_logprobs = asked if echoed is None else max(asked or 0, echoed)
    return to_sampling_params(body, max_tokens, body.logprobs, prompt_logprobs)


def asked_prompt_logprobs(request: SamplingFields) -> int | None:
    """The `prompt_logprobs` field, which a stream takes only as 0 and then ignores (vLLM's)."""
    if not request.stream or request.prompt_logprobs is None:
        return request.prompt_logprobs
    if request.prompt_logprobs > 0:
        raise InvalidRequestError(
            "prompt_logprobs are not returned in a stream: set stream to false, or use echo "
            "with logprobs on /v1/completions",
            "prompt_logprobs",
        )
    return None


def continuation_token_ids(request: SamplingFields, num_prompts: int) -> list[int] | None:
    """A continuation's tokens generated before (docs/router.md, in-flight failover), or None.
    It resumes one streamed completion."""
    if request.continuation is None:
        return None
    if not request.stream:
        raise InvalidRequestError(
            "a continuation resumes a stream: set stream to true", "continuation"
        )
    if request.n != 1 or num_prompts != 1:
        raise InvalidRequestError(
            "a continuation resumes one completion: one prompt, n = 1", "continuation"
        )
    return request.continuation.token_ids


def continuation_headers(prior: list[int] | None) -> dict[str, str] | None:
    """The header that tells a router this stream resumed the continuation (engine/protocol)."""
    return {CONTINUATION_HEADER: str(len(prior))} if prior else None
