"""StreamGuard: the endpoint picker's ext_proc service behind the port's authentication and
limits (router/picker_config.py), so a client that is not the gateway, or one that opens streams
and leaves them, cannot take destinations or inflate the in-flight count /router/demand reports.

    --picker-api-key                 a stream without gRPC metadata `authorization: Bearer KEY`
                                     is refused with UNAUTHENTICATED before it reads a message
    --picker-max-streams             a stream past the cap is refused with RESOURCE_EXHAUSTED
                                     at once (the gateway's failureMode decides what the client
                                     sees); the streams under way keep being served
    --picker-stream-idle-timeout-s   a stream that sends nothing for that long is ended (gRPC
                                     OK: the data plane carries on without the picker, as Envoy
                                     does when a processor closes its stream) and its pick, if
                                     any, is released

The bodies the picker collects are bounded by the router's body budget
(--max-buffered-body-bytes, router/http/body_budget.py), shared with the HTTP API: one past it is
an immediate 503 `router_memory_full`. The health service is not guarded: kubelet's gRPC probes
send no metadata, and it tells only whether the router is serving.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from typing import TYPE_CHECKING, TypeVar, cast

import grpc
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc

from router.picker.endpoint_picker import EndpointPicker

if TYPE_CHECKING:
    from router.picker_config import PickerConfig

logger = logging.getLogger("pagedock.router.picker")
Message = TypeVar("Message")


async def idle_limited(
    messages: AsyncIterator[Message], timeout_s: float
) -> AsyncIterator[Message]:
    """`messages` until they end or none comes within `timeout_s` of the last one."""
    while True:
        try:
            message = await asyncio.wait_for(anext(messages), timeout_s)
        except StopAsyncIteration:
            return
        except TimeoutError:
            logger.info("picker: a stream sent nothing for %gs: closed", timeout_s)
            return
        yield message


class StreamGuard(pb_grpc.ExternalProcessorServicer):
    def __init__(self, picker: EndpointPicker, config: PickerConfig) -> None:
        self.picker = picker
        self.config = config
        self.num_streams = 0
        """ext_proc streams admitted and not yet ended."""

    async def Process(
        self,
        request_iterator: AsyncIterator[pb.ProcessingRequest],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[pb.ProcessingResponse]:
        """One HTTP request's ext_proc stream, admitted or refused (the gRPC method's name)."""
        refused = self.refusal(context)
        if refused is not None:
            await context.abort(*refused)
        self.num_streams += 1
        try:
            messages = idle_limited(
                aiter(request_iterator), self.config.picker_stream_idle_timeout_s
            )
            # NOTE: closed explicitly: the picker's own cleanup (the pick released, the body
            # budget given back) must run when this stream ends, not when the garbage is
            # collected.
            picked = cast(
                AsyncGenerator[pb.ProcessingResponse, None], self.picker.Process(messages, context)
            )
            async with aclosing(picked) as responses:
                async for response in responses:
                    yield response
        finally:
            self.num_streams -= 1

    def refusal(self, context: grpc.aio.ServicerContext) -> tuple[grpc.StatusCode, str] | None:
        """Why the stream is not admitted, or None."""
        if not self.authenticated(context):
            return (
                grpc.StatusCode.UNAUTHENTICATED,
                "the endpoint picker needs `authorization: Bearer KEY` (--picker-api-key)",
            )
        cap = self.config.picker_max_streams
        if cap and self.num_streams >= cap:
            logger.warning("picker: %d streams open (--picker-max-streams): refused", cap)
            return (
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"the endpoint picker has {cap} streams open (--picker-max-streams)",
            )
        return None

    def authenticated(self, context: grpc.aio.ServicerContext) -> bool:
        key = self.config.picker_api_key
        if key is None:
            return True
        presented = dict(context.invocation_metadata() or ()).get("authorization", "")
        expected = f"Bearer {key}"
        return hmac.compare_digest(str(presented).encode(), expected.encode())
