"""POST /v1/completions/render and /v1/chat/completions/render: vLLM's model-server contract for
endpoint pickers — the token ids of a request, rendered by the code generation runs
(pagedock/text/prompt_renderer.py, the same validation as generation), without touching the model."""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

from engine.inputs.request_checks import check_prompt_ids, check_stop_token_ids, resolve_max_tokens
from engine.inputs.sampling_params import SamplingParams
from engine.server.openai.context import ServerContext
from engine.server.openai.guards import check_model
from engine.server.openai.prompt_work import chat_chars, check_prompt_chars, prompt_chars
from engine.server.openai.sampling import to_sampling_params
from pagedock.protocol import ChatCompletionRequest, CompletionRequest
from pagedock.protocol.render import RenderedRequest
from pagedock.text.prompt_renderer import completion_prompts, render_chat


def render_chat_request(ctx: ServerContext, body: ChatCompletionRequest) -> RenderedRequest:
    check_model(ctx, body.model)
    logprobs = (body.top_logprobs or 0) if body.logprobs else None
    params = to_sampling_params(body, body.resolved_max_tokens, logprobs)
    check_prompt_chars(ctx, chat_chars(body), "messages")
    prompt = render_chat(ctx.tokenizer, body)
    return _rendered(ctx, prompt.token_ids, params, body.stream)


def render_completion_request(ctx: ServerContext, body: CompletionRequest) -> list[RenderedRequest]:
    check_model(ctx, body.model)
    params = to_sampling_params(body, body.max_tokens, body.logprobs)
    check_prompt_chars(ctx, prompt_chars(body.prompt), "prompt")
    prompts = completion_prompts(ctx.tokenizer, body.prompt)
    return [_rendered(ctx, p.token_ids, params, body.stream) for p in prompts]


def _rendered(
    ctx: ServerContext, token_ids: list[int], params: SamplingParams, stream: bool | None
) -> RenderedRequest:
    """The engine's own checks (engine/inputs/request_checks.py), then max_tokens resolved as it would
    be: a render succeeds exactly when generation would accept the request."""
    if ctx.vocab_size is not None:
        check_prompt_ids(token_ids, ctx.vocab_size)
        check_stop_token_ids(params, ctx.vocab_size)
    max_tokens = resolve_max_tokens(len(token_ids), params, ctx.max_model_len)
    return RenderedRequest(
        request_id=uuid.uuid4().hex,
        token_ids=token_ids,
        sampling_params=_params_dict(dataclasses.replace(params, max_tokens=max_tokens)),
        model=ctx.served_model_name,
        stream=stream,
    )


def _params_dict(params: SamplingParams) -> dict[str, Any]:
    values = {f.name: getattr(params, f.name) for f in dataclasses.fields(params)}
    values.pop("output_kind", None)  # an engine-internal delivery mode, not a sampling choice
    return values
