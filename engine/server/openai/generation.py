"""Generation: the engine requests behind one HTTP request, as choices that grow step by step.

A completions request may carry several prompts; each becomes one engine request (with its own
`n`), and choice `prompt_index * n + completion.index` of the response. The engine requests run
as DELTA: each output carries only what its step added, so a choice grows by appending, and a
streamed chunk is what the outputs that arrived since the last chunk added. Streaming and
non-streaming responses are built from the same deltas, so their text is identical.

The client going away (streaming or not) aborts every engine request at once; a generation holds
its tenant's quota from admission (after its prompts are checked, before they are queued) until
`close`, when the tokens its choices received are counted (the life every request has:
engine/server/openai/request_job.py).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import TypeVar, cast

from fastapi import Request

from engine.core.scheduler_output import SampledToken
from engine.inputs.engine_request import AdapterRef, EngineRequest
from engine.inputs.sampling_params import RequestOutputKind, SamplingParams
from engine.runtime.async_engine import QueueFullError, RequestStream
from engine.runtime.logprobs import PromptLogprobs
from engine.runtime.outputs import CompletionOutput, RequestOutput
from engine.server.openai.context import ServerContext
from engine.server.openai.errors import GenerationError
from engine.server.openai.handoff import HandedOff, cut_by_drain
from engine.server.openai.request_job import RequestJob
from engine.server.tenancy.tenant_admission import admit_tenant
from engine.server.tenancy.tenant_resolver import tenant_of
from pagedock.errors import InvalidRequestError, InvalidRequestFailure
from pagedock.protocol import PromptTokensDetails, UsageInfo
from pagedock.tenancy.tenants import Tenant
from pagedock.text.prompt_renderer import Prompt

logger = logging.getLogger("pagedock.server")
T = TypeVar("T")


@dataclass
class ChoiceState:
    """Everything sent so far for one choice (appended to, never rebuilt)."""

    index: int
    text_parts: list[str] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[SampledToken] = field(default_factory=list)
    finish_reason: str | None = None
    stop_reason: int | str | None = None

    @property
    def text(self) -> str:
        return "".join(self.text_parts)

    def append(self, completion: CompletionOutput) -> None:
        self.text_parts.append(completion.text)
        self.token_ids.extend(completion.token_ids)
        self.logprobs.extend(completion.logprobs or ())
        self.finish_reason = completion.finish_reason
        self.stop_reason = completion.stop_reason


@dataclass
class ChoiceDelta:
    """What one choice gained since the last chunk (one or more engine outputs)."""

    index: int
    text: str
    token_ids: list[int]
    logprobs: list[SampledToken]
    finish_reason: str | None
    stop_reason: int | str | None

    def __bool__(self) -> bool:
        return bool(self.text or self.token_ids or self.finish_reason)


class Generation(RequestJob):
    def __init__(
        self,
        ctx: ServerContext,
        prompts: list[Prompt],
        n: int,
        lora_request: AdapterRef | None = None,
    ) -> None:
        super().__init__(ctx, lora_request)
        self.prompts = prompts
        self.n = n
        self.choices = {i: ChoiceState(i) for i in range(len(prompts) * n)}
        self._num_cached_tokens: dict[int, int] = {}
        self.prompt_logprobs: dict[int, PromptLogprobs] = {}
        """By prompt index, once the engine computed them (with the prompt's first token)."""
        self.hands_off = False
        """A stream a router can resume: aborted at the drain deadline, it is handed off
        (HandedOff) instead of finishing with `abort`."""
        self.num_prior_tokens = 0

    @classmethod
    async def start(
        cls,
        ctx: ServerContext,
        raw_request: Request,
        prompts: list[Prompt],
        params: SamplingParams,
        priority: int,
        arrival_time: float,
        prior_output_token_ids: list[int] | None = None,
        lora_request: AdapterRef | None = None,
        cache_salt: str | None = None,
    ) -> Generation:
        """Check every prompt, admit the request against its tenant's quota (a 429 otherwise:
        engine/server/tenancy/), then queue every prompt at once (admitted together or refused
        with QueueFullError); on any failure, abort those already queued and re-raise. The
        client's disconnect is watched from the start, so a client that leaves while its prompts
        are queued stops them all. `prior_output_token_ids`: a continuation of the one choice
        (they count in its usage); `lora_request`: the adapter the model names (None: the base
        model); `cache_salt`: vLLM's. The tenant is the one its route resolved."""
        gen = cls(ctx, prompts, params.n, lora_request)
        gen.begin(raw_request, arrival_time)
        params = replace(params, output_kind=RequestOutputKind.DELTA)
        if prior_output_token_ids:
            gen.choices[0].token_ids.extend(prior_output_token_ids)
            gen.num_prior_tokens = len(prior_output_token_ids)
        tenant = tenant_of(raw_request)
        prepare = functools.partial(
            ctx.engine.prepare_request,
            params=params,
            priority=priority,
            arrival_time=arrival_time,
            prior_output_token_ids=prior_output_token_ids,
            lora_request=lora_request,
            cache_salt=cache_salt,
            tenant=tenant.name,
        )
        try:
            await gen._admit_and_queue(tenant, priority, prepare)
        except BaseException:
            gen.close()
            raise
        if gen.closed:  # the client left while its prompts were queued
            gen.close()
        return gen

    async def _admit_and_queue(
        self, tenant: Tenant, priority: int, prepare: Callable[..., Awaitable[EngineRequest]]
    ) -> None:
        """Every prompt checked (all or none: the first failure is raised once all are back),
        the tenant's quota admits the request, then every prompt is queued."""
        metrics = self.ctx.metrics.tenants
        try:
            self.ctx.engine.check_admission(len(self.prompts))
            requests = await _all_or_first_error(
                prepare(f"{self.id}-{i}", p.token_ids, prompt_text=p.text)
                for i, p in enumerate(self.prompts)
            )
        except QueueFullError:
            metrics.observe_rejected(tenant.name, "queue_full")
            raise
        self.admission = await admit_tenant(
            self.ctx.quotas, metrics, tenant, priority, self.num_prompt_tokens
        )
        await self.queue_all(requests)

    @property
    def num_prompt_tokens(self) -> int:
        """Each prompt's tokens once, whatever `n` (as usage counts them)."""
        return sum(len(p.token_ids) for p in self.prompts)

    @property
    def num_generated_tokens(self) -> int:
        """The tokens every choice received here (a continuation's earlier ones not counted)."""
        return sum(len(c.token_ids) for c in self.choices.values()) - self.num_prior_tokens

    async def deltas(self) -> AsyncIterator[list[ChoiceDelta]]:
        """What the outputs that arrived since the last look added, until every choice has
        finished."""
        async for prompt_index, outputs in self._outputs():
            added: dict[int, list[CompletionOutput]] = {}
            for output in outputs:
                self._num_cached_tokens[prompt_index] = output.num_cached_tokens
                if output.prompt_logprobs is not None:
                    self.prompt_logprobs[prompt_index] = output.prompt_logprobs
                for completion in output.outputs:
                    if completion.finish_reason == "error" or output.error:
                        raise _failure(output.error)
                    if completion.finish_reason == "abort" and self._handed_off():
                        raise HandedOff(self.id)
                    index = prompt_index * self.n + completion.index
                    self.choices[index].append(completion)
                    added.setdefault(index, []).append(completion)
            deltas = [d for i, c in sorted(added.items()) if (d := _delta(i, c))]
            if deltas:
                yield deltas

    async def collect(self) -> list[ChoiceState]:
        """Every choice, finished; cut_by_drain()'s 503 when the drain deadline aborted one (a
        cut answer is an error to retry, never a 200 that looks whole)."""
        async for _ in self.deltas():
            pass
        choices = [self.choices[i] for i in sorted(self.choices)]
        if self.ctx.handing_off and any(c.finish_reason == "abort" for c in choices):
            raise cut_by_drain()
        return choices

    def usage(self) -> UsageInfo:
        prompt_tokens = self.num_prompt_tokens
        completion_tokens = sum(len(c.token_ids) for c in self.choices.values())
        cached = sum(self._num_cached_tokens.values())
        return UsageInfo(
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            total_tokens=prompt_tokens + completion_tokens,
            prompt_tokens_details=PromptTokensDetails(cached_tokens=cached),
        )

    def _handed_off(self) -> bool:
        return self.hands_off and self.ctx.handing_off

    async def _outputs(self) -> AsyncIterator[tuple[int, list[RequestOutput]]]:
        if len(self.streams) == 1:
            async for batch in self.streams[0].batches():
                yield 0, batch
            return
        merged: asyncio.Queue[tuple[int, list[RequestOutput]] | BaseException | None] = (
            asyncio.Queue()
        )
        pumps = [asyncio.create_task(_pump(i, s, merged)) for i, s in enumerate(self.streams)]
        try:
            for _ in range(len(pumps)):
                while (item := await merged.get()) is not None:
                    if isinstance(item, BaseException):
                        raise item
                    yield item
        finally:
            for pump in pumps:
                pump.cancel()


async def _all_or_first_error(works: Iterable[Awaitable[T]]) -> list[T]:
    """Every result, once all are back; or the first failure, once all are back."""
    results = await asyncio.gather(*works, return_exceptions=True)
    failed = next((r for r in results if isinstance(r, BaseException)), None)
    if failed is not None:
        raise failed
    return cast(list[T], results)


async def _pump(
    index: int,
    stream: RequestStream,
    merged: asyncio.Queue[tuple[int, list[RequestOutput]] | BaseException | None],
) -> None:
    try:
        async for batch in stream.batches():
            merged.put_nowait((index, batch))
    except Exception as e:
        merged.put_nowait(e)
    merged.put_nowait(None)


def _failure(error: str | None) -> Exception:
    """What a request that failed in the engine raises: the client's error (400) when its own
    content caused it, else the engine's (500)."""
    if isinstance(error, InvalidRequestFailure):
        return InvalidRequestError(error, error.param)
    return GenerationError(error or "the request failed in the engine")


def _delta(index: int, completions: list[CompletionOutput]) -> ChoiceDelta:
    """One choice's engine outputs since the last chunk, as one delta."""
    if len(completions) == 1:  # the usual case: one step's output
        c = completions[0]
        return ChoiceDelta(
            index, c.text, c.token_ids, c.logprobs or [], c.finish_reason, c.stop_reason
        )
    last = completions[-1]
    return ChoiceDelta(
        index,
        "".join(c.text for c in completions),
        [t for c in completions for t in c.token_ids],
        [lp for c in completions for lp in c.logprobs or ()],
        last.finish_reason,
        last.stop_reason,
    )
