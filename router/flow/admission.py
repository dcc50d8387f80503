"""Admission: one request's way through quotas and flow control, and its account when it ends.

    admit(...)        the tenant's quota (429 with OpenAI's x-ratelimit-* headers), then a flow
                      slot (waits; 429 fleet_saturated or queue_timeout)
    attach(response)  the tenant's x-ratelimit-* headers on the answer; its completion tokens
                      counted when it ends (a stream: when its last chunk has gone or its client
                      left), then the slot and the quota's concurrency given back

Completion tokens come from the answer's `usage` (`completion_tokens`, or a response's
`output_tokens`; a non-streamed answer always has it; a chat or completions stream when its client
asked for `stream_options.include_usage`, a Responses API stream in its last event); a stream
without it is counted by its events, one token each, as the engine sends them (an estimate: a
chunk may carry more than one).
"""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass

from fastapi import Response
from fastapi.responses import StreamingResponse

from pagedock.http.errors import APIError
from pagedock.tenancy.quota import QuotaExceeded
from pagedock.tenancy.quota_store import Lease, QuotaStore, QuotaStoreUnavailable
from pagedock.tenancy.tenants import Tenant
from router.flow.flow_controller import FlowController, FlowRefused, FlowTicket
from router.flow.flow_metrics import FlowMetrics

# Never inside a string of the JSON: a quote there is escaped (\").
_COMPLETION_TOKENS = re.compile(rb'"(?:completion|output)_tokens"\s*:\s*(\d+)')
_USAGE_TAIL_BYTES = 4096
_EVENT = b"data: {"
Chunk = str | bytes | memoryview


@dataclass
class Admission:
    tenant: Tenant
    lease: Lease
    ticket: FlowTicket
    metrics: FlowMetrics

    def attach(self, response: Response) -> Response:
        response.headers.update(self.lease.headers())
        if isinstance(response, StreamingResponse):
            response.body_iterator = self._counted(response.body_iterator)
        else:
            self.finish(_completion_tokens(bytes(response.body)) or 0)
        return response

    def finish(self, completion_tokens: int) -> None:
        """Count the completion tokens and give back what the request held (once)."""
        if self.ticket.released:
            return
        self.lease.finish(completion_tokens)
        self.ticket.charge(completion_tokens)
        self.ticket.release()
        self.metrics.observe_tokens(self.tenant.name, "completion", completion_tokens)

    async def _counted(self, chunks: AsyncIterable[Chunk]) -> AsyncIterator[Chunk]:
        usage, events = None, 0
        try:
            async for chunk in chunks:
                data = chunk.encode() if isinstance(chunk, str) else bytes(chunk)
                found = _completion_tokens(data)
                usage = found if found is not None else usage
                events += data.count(_EVENT)
                yield chunk
        finally:
            self.finish(usage if usage is not None else max(0, events - 1))


async def admit(
    tenant: Tenant,
    priority: int,
    prompt_tokens: int,
    quotas: QuotaStore,
    flow: FlowController,
    metrics: FlowMetrics,
) -> Admission:
    """The request's quota lease and flow slot, or its 429 (counted by reason); a 503 when the
    shared quota store does not answer."""
    try:
        lease = await quotas.admit(tenant, prompt_tokens)
    except QuotaStoreUnavailable as e:
        metrics.observe_rejected(tenant.name, "quota_store_unavailable")
        raise APIError(
            503, str(e), code="quota_store_unavailable", headers={"Retry-After": "1"}
        ) from e
    except QuotaExceeded as e:
        metrics.observe_rejected(tenant.name, e.refusal.code)
        r = e.refusal
        raise APIError(r.status, r.message, code=r.code, headers=r.headers) from e
    metrics.observe_tokens(tenant.name, "prompt", prompt_tokens)
    try:
        ticket = await flow.admit(tenant.name, priority, prompt_tokens)
    except FlowRefused as e:
        lease.finish()
        metrics.observe_rejected(tenant.name, e.code)
        headers = {**lease.headers(), "retry-after": _retry_after(flow)}
        raise APIError(429, str(e), code=e.code, headers=headers) from e
    except BaseException:
        lease.finish()
        raise
    metrics.observe_admitted(tenant.name, priority, ticket.waited_s)
    return Admission(tenant, lease, ticket, metrics)


def _retry_after(flow: FlowController) -> str:
    """About how long the queue ahead takes to move: its oldest waiter's wait so far."""
    return str(max(1, min(30, round(flow.oldest_wait_s(time.monotonic())))))


def _completion_tokens(data: bytes) -> int | None:
    """The last count in `data`: looked for near its end first, where chat and completions put
    `usage` (a response echoes its request's settings, instructions and tools, after it)."""
    found = _COMPLETION_TOKENS.findall(data[-_USAGE_TAIL_BYTES:])
    if not found and len(data) > _USAGE_TAIL_BYTES:
        found = _COMPLETION_TOKENS.findall(data)
    return int(found[-1]) if found else None
