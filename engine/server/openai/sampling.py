"""From an OpenAI request to the engine's SamplingParams (which validates the values)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.inputs.sampling_params import SamplingParams
from engine.server.openai.structured_outputs import structured_outputs_of
from engine.tool_calls.chat_tools import ToolCalling, plan_tool_calling
from pagedock.errors import InvalidRequestError
from pagedock.protocol import CONTINUATION_HEADER, ChatCompletionRequest, SamplingFields

if TYPE_CHECKING:
    from engine.server.openai.context import ServerOptions


def to_sampling_params(
    request: SamplingFields, max_tokens: int | None, logprobs: int | None
) -> SamplingParams:
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
    params = to_sampling_params(body, body.resolved_max_tokens, logprobs)
    tools = plan_tool_calling(options, body)
    if tools is not None:
        params = tools.guide(params)
    return params, tools


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
