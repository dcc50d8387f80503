"""POST /v1/completions: prompts (text or token ids, one or a batch) to text, JSON or SSE."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

from fastapi import Request, Response

from engine.core.scheduler_output import SampledToken
from engine.server.openai.context import ServerContext
from engine.server.openai.errors import to_api_error
from engine.server.openai.generation import ChoiceDelta, ChoiceState, Generation
from engine.server.openai.guards import resolve_model
from engine.server.openai.handoff import HandedOff, hands_off
from engine.server.openai.logprobs import (
    answer_body,
    answer_json,
    completion_logprobs,
    echo_logprobs,
    joined,
    num_logprob_entries,
    num_prompt_entries,
    prompt_logprobs_field,
)
from engine.server.openai.prompt_work import check_prompt_chars, in_prompt_pool, prompt_chars
from engine.server.openai.sampling import (
    completion_sampling_params,
    continuation_headers,
    continuation_token_ids,
)
from engine.server.tenancy.tenant_resolver import tenant_of
from pagedock.http.sse import SSE_DONE, sse_data, sse_error, sse_response
from pagedock.protocol import (
    CompletionChoice,
    CompletionLogprobs,
    CompletionRequest,
    CompletionResponse,
    UsageInfo,
    now_s,
    response_exclusions,
)
from pagedock.protocol.openai import HANDOFF_EVENT, PromptLogprobsField
from pagedock.text.detokenizer import IncrementalDetokenizer
from pagedock.text.prompt_renderer import completion_prompts


async def create_completion(
    ctx: ServerContext, body: CompletionRequest, raw_request: Request
) -> Response:
    arrival_time = time.monotonic()
    adapter = resolve_model(ctx, body.model)
    params = completion_sampling_params(body)
    check_prompt_chars(ctx, prompt_chars(body.prompt), "prompt")
    prompts = await in_prompt_pool(ctx, completion_prompts, ctx.tokenizer, body.prompt)
    prior = continuation_token_ids(body, len(prompts))
    gen = await Generation.start(
        ctx,
        raw_request,
        prompts,
        params,
        ctx.tenants.priority(tenant_of(raw_request), body),
        arrival_time,
        prior,
        adapter,
        body.cache_salt,
    )
    if body.stream:
        headers = {**gen.rate_limit_headers(), **(continuation_headers(prior) or {})}
        return sse_response(_stream(ctx, body, gen), headers)
    try:
        choices = await gen.collect()
    finally:
        gen.close()
    usage = gen.usage()
    entries = num_logprob_entries(choices, body.logprobs) + _num_prompt_entries(body, gen, choices)
    content = await answer_body(entries, lambda: _response_json(ctx, body, gen, choices, usage))
    return Response(content, media_type="application/json", headers=gen.rate_limit_headers())


def _response_json(
    ctx: ServerContext,
    body: CompletionRequest,
    gen: Generation,
    choices: list[ChoiceState],
    usage: UsageInfo,
) -> bytes:
    """The whole non-streamed answer as JSON (any thread: `gen` has finished)."""
    response = CompletionResponse(
        id=f"cmpl-{gen.id}",
        model=gen.model,
        choices=[_choice(ctx, body, gen, c) for c in choices],
        usage=usage,
        prompt_token_ids=gen.prompts[0].token_ids if len(gen.prompts) == 1 else None,
    )
    return answer_json(response, response_exclusions(True, body.return_token_ids))


def _choice(
    ctx: ServerContext, body: CompletionRequest, gen: Generation, c: ChoiceState
) -> CompletionChoice:
    echo = _echo(body, gen, c.index)
    generated = not body.echo_without_generation
    sampled = c.logprobs if generated else []
    return CompletionChoice(
        index=c.index,
        text=echo + (c.text if generated else ""),
        logprobs=_logprobs(ctx, body, gen, c.index, sampled, len(echo), body.echo),
        finish_reason=c.finish_reason,
        stop_reason=c.stop_reason,
        token_ids=c.token_ids if generated else [],
        prompt_logprobs=_prompt_logprobs_field(body, gen, c.index // gen.n),
    )


async def _stream(
    ctx: ServerContext, body: CompletionRequest, gen: Generation
) -> AsyncIterator[str]:
    created = now_s()
    sent_chars = {i: len(_echo(body, gen, i)) for i in gen.choices}
    if body.continuation is not None:  # its client has had the echo and the text so far
        sent_chars = {0: len(_echo(body, gen, 0)) + len(_prior_text(ctx, body, gen))}
    exclude = response_exclusions(body.include_usage, body.return_token_ids) or {}
    # A chunk's choice has no prompt_logprobs (vLLM's neither): a stream never carries them.
    choice_exclude = exclude.setdefault("choices", {}).setdefault("__all__", set())
    choice_exclude.add("prompt_logprobs")
    prompt_token_ids = gen.prompts[0].token_ids if len(gen.prompts) == 1 else None
    gen.hands_off = hands_off(body.return_token_ids, len(gen.choices))
    echo = body.echo and body.continuation is None
    # With logprobs the echo carries the prompt's, computed with the first token: each choice's
    # echo then goes with its first delta (as vLLM sends it), not ahead of it.
    echo_pending = set(gen.choices) if echo and body.logprobs is not None else set()

    def chunk(choices: list[CompletionChoice], usage: UsageInfo | None = None) -> str:
        nonlocal prompt_token_ids
        message = CompletionResponse(
            id=f"cmpl-{gen.id}",
            created=created,
            model=gen.model,
            choices=choices,
            usage=usage if usage is not None or not body.continuous_usage else gen.usage(),
            prompt_token_ids=prompt_token_ids,  # in the first chunk only
        )
        prompt_token_ids = None
        return sse_data(message.model_dump_json(exclude=exclude))

    try:
        if echo and not echo_pending:
            yield chunk([CompletionChoice(index=i, text=_echo(body, gen, i)) for i in gen.choices])
        async for deltas in gen.deltas():
            yield chunk(
                [_chunk_choice(ctx, body, gen, d, sent_chars, echo_pending) for d in deltas]
            )
        if body.include_usage:
            yield chunk([], gen.usage())
    except HandedOff:
        yield HANDOFF_EVENT  # and no [DONE]: a router resumes the stream elsewhere
        return
    except Exception as e:
        yield sse_error(to_api_error(e))
    finally:
        gen.close()
    yield SSE_DONE


def _chunk_choice(
    ctx: ServerContext,
    body: CompletionRequest,
    gen: Generation,
    delta: ChoiceDelta,
    sent_chars: dict[int, int],
    echo_pending: set[int],
) -> CompletionChoice:
    """`echo_pending`: the choices whose echo goes with their next delta (taken out here)."""
    generated = not body.echo_without_generation
    text = delta.text if generated else ""
    offset = sent_chars[delta.index]
    sent_chars[delta.index] += len(text)
    with_echo = delta.index in echo_pending
    echo_pending.discard(delta.index)
    sampled = delta.logprobs if generated else []
    return CompletionChoice(
        index=delta.index,
        text=(_echo(body, gen, delta.index) if with_echo else "") + text,
        logprobs=_logprobs(ctx, body, gen, delta.index, sampled, offset, with_echo),
        finish_reason=delta.finish_reason,
        stop_reason=delta.stop_reason,
        token_ids=delta.token_ids if generated else [],
    )


def _logprobs(
    ctx: ServerContext,
    body: CompletionRequest,
    gen: Generation,
    choice_index: int,
    sampled: list[SampledToken],
    text_offset: int,
    with_echo: bool,
) -> CompletionLogprobs | None:
    """The choice's logprobs: the generated tokens' from `text_offset` on, after the echoed
    prompt's when `with_echo`."""
    if body.logprobs is None:
        return None
    result = completion_logprobs(ctx.tokenizer, sampled, text_offset)
    prompt_index = choice_index // gen.n
    prompt_logprobs = gen.prompt_logprobs.get(prompt_index)
    if not with_echo or prompt_logprobs is None:  # None: it failed before its first token
        return result
    prompt_token_ids = gen.prompts[prompt_index].token_ids
    echoed = echo_logprobs(ctx.tokenizer, prompt_token_ids, prompt_logprobs, body.logprobs)
    return joined(echoed, result)


def _prompt_logprobs_field(
    body: CompletionRequest, gen: Generation, prompt_index: int
) -> PromptLogprobsField | None:
    """vLLM's `prompt_logprobs` of a choice, when the request's field asked for them."""
    prompt_logprobs = gen.prompt_logprobs.get(prompt_index)
    if body.prompt_logprobs is None or prompt_logprobs is None:
        return None
    return prompt_logprobs_field(prompt_logprobs, body.prompt_logprobs)


def _num_prompt_entries(
    body: CompletionRequest, gen: Generation, choices: list[ChoiceState]
) -> int:
    """Log-probability entries the prompts' logprobs add to the answer (echo and field)."""
    echoed = body.logprobs if body.echo else None
    return sum(
        num_prompt_entries(gen.prompt_logprobs.get(c.index // gen.n), echoed)
        + num_prompt_entries(gen.prompt_logprobs.get(c.index // gen.n), body.prompt_logprobs)
        for c in choices
    )


def _prior_text(ctx: ServerContext, body: CompletionRequest, gen: Generation) -> str:
    """The text a continuation's client already has (for the logprobs' text offsets)."""
    if body.logprobs is None or body.continuation is None or ctx.tokenizer is None:
        return ""
    stop = [body.stop] if isinstance(body.stop, str) else body.stop
    detokenizer = IncrementalDetokenizer(
        ctx.tokenizer,
        gen.prompts[0].token_ids,
        body.skip_special_tokens,
        stop,
        body.include_stop_str_in_output,
        body.min_tokens,
    )
    return detokenizer.replay(body.continuation.token_ids)


def _echo(body: CompletionRequest, gen: Generation, choice_index: int) -> str:
    if not body.echo:
        return ""
    return gen.prompts[choice_index // gen.n].text or ""
