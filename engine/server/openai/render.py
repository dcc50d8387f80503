"""POST /v1/completions/render and /v1/chat/completions/render: vLLM's model-server contract for
endpoint pickers — the token ids of a request, rendered by the code generation runs
(pagedock/text/prompt_renderer.py), without touching the model. A request is read as generation
reads it and checked by the engine's own input processor (engine/inputs/input_processor.py), so a
render succeeds exactly when generation would accept the request, with the same errors."""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

from engine.inputs.engine_request import AdapterRef
from engine.inputs.sampling_params import SamplingParams
from engine.server.openai.context import ServerContext
from engine.server.openai.guards import resolve_model
from engine.server.openai.prompt_work import chat_chars, check_prompt_chars, prompt_chars
from engine.server.openai.sampling import (
    chat_sampling_params,
    completion_sampling_params,
    continuation_token_ids,
)
from pagedock.protocol import ChatCompletionRequest, CompletionRequest
from pagedock.protocol.render import RenderedRequest
from pagedock.text.prompt_renderer import completion_prompts, render_chat


def render_chat_request(ctx: ServerContext, body: ChatCompletionRequest) -> RenderedRequest:
    adapter = resolve_model(ctx, body.model)
    params, _ = chat_sampling_params(ctx.options, body)
    prior = continuation_token_ids(body, 1)
    check_prompt_chars(ctx, chat_chars(body), "messages")
    prompt = render_chat(ctx.tokenizer, body)
    return _rendered(ctx, prompt.token_ids, params, body.stream, prior, adapter)


def render_completion_request(ctx: ServerContext, body: CompletionRequest) -> list[RenderedRequest]:
    adapter = resolve_model(ctx, body.model)
    params = completion_sampling_params(body)
    check_prompt_chars(ctx, prompt_chars(body.prompt), "prompt")
    prompts = completion_prompts(ctx.tokenizer, body.prompt)
    prior = continuation_token_ids(body, len(prompts))
    return [_rendered(ctx, p.token_ids, params, body.stream, prior, adapter) for p in prompts]


def _rendered(
    ctx: ServerContext,
    token_ids: list[int],
    params: SamplingParams,
    stream: bool | None,
    prior: list[int] | None,
    adapter: AdapterRef | None,
) -> RenderedRequest:
    """The engine request generation would queue (max_tokens resolved), as the contract's
    RenderedRequest; its `model` is the adapter's name when the request names one."""
    request = ctx.engine.input_processor.process(
        uuid.uuid4().hex,
        token_ids,
        params,
        prior_output_token_ids=prior or (),
        lora_request=adapter,
    )
    return RenderedRequest(
        request_id=request.request_id,
        token_ids=request.prompt_token_ids,
        sampling_params=_params_dict(request.sampling_params),
        model=ctx.served_model_name if adapter is None else adapter.name,
        stream=stream,
    )


def _params_dict(params: SamplingParams) -> dict[str, Any]:
    values = {f.name: getattr(params, f.name) for f in dataclasses.fields(params)}
    values.pop("output_kind", None)  # an engine-internal delivery mode, not a sampling choice
    return values
