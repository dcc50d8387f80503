"""StreamFailover: relays a resumable stream and, when its replica fails after the first byte,
goes on from another replica as a continuation, in the same client stream.

    relay       the replica's chunks, event by event, through the stream's transcript
                (router/http/stream_resume.py: what the client has, how to go on)
    a failure   a broken connection, an end without [DONE], a stall, a draining replica's
                handoff: the replica is marked unhealthy (a stalled one already is) and the best
                healthy pagedock replica not tried yet that serves the request's model (its LoRA
                adapter) and the same weights (root hash) is asked for the continuation, at most
                --max-stream-resumes times
    the end     [DONE] when only the end was lost; an SSE error event when the stream can't be
                resumed (sse_error_event, the proxy's too for a stream it can't resume)
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
from fastapi import Request

from pagedock.http.errors import error_json
from pagedock.http.internal_key import internal_key_headers
from pagedock.protocol import CONTINUATION_HEADER
from router.http.route_trace import trace_of
from router.http.stream_resume import Resumable, Segment, StreamTranscript
from router.http.upstream import UPSTREAM_ERRORS, AttemptFailed
from router.http.upstream_errors import Verdict, classify_upstream, refuses_model
from router.metrics import RouterMetrics
from router.policies.dispatcher import Decision, Dispatcher, NoReplicaError
from router.replicas.replica import Replica
from router.replicas.replica_set import ReplicaSet
from router.replicas.stall_watch import ReplicaStalled, StreamWatch, unless_stalled

logger = logging.getLogger("pagedock.router")

Exchange = Callable[
    [Request, dict[str, str], bytes, Replica, bool],
    Awaitable[tuple[aiohttp.ClientResponse, bytes | None]],
]
"""The proxy's request to one replica (Proxy._exchange): its answer's headers and, unless it is a
stream, its whole body; AttemptFailed when it could not be had."""


class StreamFailover:
    def __init__(
        self,
        dispatcher: Dispatcher,
        replica_set: ReplicaSet,
        metrics: RouterMetrics,
        exchange: Exchange,
    ) -> None:
        self.dispatcher = dispatcher
        self.replica_set = replica_set
        self.metrics = metrics
        self._exchange = exchange

    async def relay(self, segment: Segment, resumable: Resumable) -> AsyncIterator[bytes]:
        """Relay the stream; when its replica fails, go on from another as a continuation."""
        transcript = StreamTranscript(resumable.plan)
        tried, resumes = [segment.replica.url], 0
        # The weights the answer began on: it goes on only on a replica with the same.
        weights = segment.replica.root_hash
        try:
            while True:
                async for piece in self._relay_segment(segment, transcript):
                    yield piece
                if transcript.done:
                    return
                cause = _cause(segment, transcript)
                logger.warning("stream from %s broke: %s", segment.replica.url, cause)
                if transcript.finished:  # all generated: only the end of the stream was lost
                    yield b"data: [DONE]\n\n"
                    return
                if not transcript.resumable or resumes >= self.dispatcher.config.max_stream_resumes:
                    self.metrics.observe_failure("mid_stream")
                    yield sse_error_event(f"the replica failed mid-stream ({cause})", b"\n\n")
                    return
                resumes += 1
                segment.close()
                if cause != "stalled":  # a stalled replica left the healthy set already
                    self.replica_set.mark_unhealthy(segment.replica, cause)
                resumed = await self._resume(resumable, transcript, tried, weights)
                self.metrics.observe_resume(resumed is not None)
                if (trace := trace_of(resumable.request)) is not None:
                    trace.resumed(None if resumed is None else resumed.replica.url, cause)
                if resumed is None:
                    self.metrics.observe_failure("mid_stream")
                    yield _unresumed_event(cause)
                    return
                segment = resumed
                transcript.next_segment()
        finally:
            segment.close()

    async def _relay_segment(
        self, segment: Segment, transcript: StreamTranscript
    ) -> AsyncIterator[bytes]:
        """One replica's chunks for the client; a failure is left in `segment.failure`."""
        watch = StreamWatch(
            segment.replica, self.dispatcher.config.stall_eject_s, segment.upstream.close
        )
        try:
            if piece := transcript.feed(segment.first):
                yield piece
            async for chunk in segment.chunks:
                watch.chunk()
                if piece := transcript.feed(chunk):
                    yield piece
            if watch.stalled:  # the closed connection may read as a clean end
                segment.failure = "stalled"
        except UPSTREAM_ERRORS as e:
            segment.failure = "stalled" if watch.stalled else type(e).__name__
        finally:
            watch.stop()

    async def _send(
        self, resumable: Resumable, headers: dict[str, str], body: bytes, replica: Replica
    ) -> tuple[aiohttp.ClientResponse, bytes | None]:
        """A continuation sent to `replica` (an upstream span of its own, when tracing is on)."""
        trace = trace_of(resumable.request)

        def send(sent: dict[str, str]) -> Awaitable[tuple[aiohttp.ClientResponse, bytes | None]]:
            return self._exchange(resumable.request, sent, body, replica, True)

        if trace is None:
            return await send(headers)
        return await trace.attempt(replica.url, headers, send, lambda a: a[0].status, resume=True)

    async def _resume(
        self,
        resumable: Resumable,
        transcript: StreamTranscript,
        tried: list[str],
        weights: bytes | None,
    ) -> Segment | None:
        """The stream's continuation from the best replica not tried yet, serving `weights`,
        that starts it."""
        body = resumable.plan.body(transcript.token_ids)
        # The internal key: engines take a continuation from the fleet's routers only.
        key = internal_key_headers(self.dispatcher.config.internal_api_key)
        headers = {**resumable.headers, **key}
        grace_s = self.dispatcher.config.stall_eject_s
        for _ in range(self.dispatcher.config.max_attempts):
            chosen = self._next_replica(resumable, tried, weights)
            if chosen is None:
                return None
            decision, replica = chosen
            tried.append(replica.url)
            request_id = uuid.uuid4().hex
            self.dispatcher.commit(decision, replica, request_id)
            self.metrics.observe_retry(replica.url, "resume")
            try:
                upstream, content = await unless_stalled(
                    replica,
                    self._send(resumable, headers, body, replica),
                    grace_s,
                )
            except (AttemptFailed, ReplicaStalled) as e:
                replica.end(request_id)
                if isinstance(e, AttemptFailed) and e.mark_unhealthy:
                    self.replica_set.mark_unhealthy(replica, e.cause)
                continue
            if content is not None or CONTINUATION_HEADER not in upstream.headers:
                # An error answer, or an engine that would restart the answer: not here.
                replica.end(request_id)
                upstream.close()
                if content is not None and _refused(resumable, replica, upstream.status, content):
                    return None  # the continuation itself was refused: no replica will take it
                continue
            segment = await self._first_chunk(upstream, replica, request_id)
            if segment is not None:
                return segment
        return None

    def _next_replica(
        self, resumable: Resumable, tried: list[str], weights: bytes | None
    ) -> tuple[Decision, Replica] | None:
        """The best replica not tried yet that can resume the stream, with its decision: a
        pagedock engine serving the weights the stream began on (an unknown root is no match:
        a revision could change mid-answer)."""
        if weights is None:
            return None
        try:
            decision = self.dispatcher.decide(
                resumable.decision.blocks, model=resumable.decision.model
            )
        except NoReplicaError:
            return None
        # Only a pagedock engine resumes a continuation (another restarts the answer); only
        # replicas serving the request's model (its LoRA adapter) are candidates.
        replica = next(
            (
                r
                for r in decision.replicas
                if r.url not in tried and r.kind == "pagedock" and r.root_hash == weights
            ),
            None,
        )
        return None if replica is None else (decision, replica)

    async def _first_chunk(
        self, upstream: aiohttp.ClientResponse, replica: Replica, request_id: str
    ) -> Segment | None:
        """The continuation's part of the stream, once its first chunk came; None when it failed
        before it."""
        chunks = upstream.content.iter_any()
        try:
            first = await unless_stalled(
                replica, anext(chunks), self.dispatcher.config.stall_eject_s
            )
        except (*UPSTREAM_ERRORS, StopAsyncIteration, ReplicaStalled):
            replica.end(request_id)
            upstream.close()
            return None
        replica.first_byte(request_id)
        return Segment(first, chunks, upstream, replica, request_id)


def _cause(segment: Segment, transcript: StreamTranscript) -> str:
    if transcript.handed_off:
        return "handoff"  # a draining replica's deadline
    return segment.failure or "ended_early"  # closed without [DONE]


def _unresumed_event(cause: str) -> bytes:
    """The end of a stream no replica could resume: after a handoff, none served its weights
    (a rollout to other weights, or no other replica); after a failure, none took it."""
    if cause == "handoff":
        message = (
            "the replica shut down mid-stream and no replica serving the same model weights "
            "could resume it"
        )
        return sse_error_event(message, b"\n\n", code="replica_draining")
    message = f"the replica failed mid-stream ({cause}) and no other could resume it"
    return sse_error_event(message, b"\n\n")


def _refused(resumable: Resumable, replica: Replica, status: int, content: bytes) -> bool:
    """Is a replica's error answer to the continuation the request's own (so every replica would
    refuse it)? A 404 for the request's model is that replica's: it leaves the model's
    candidates, and the next replica is asked."""
    model = resumable.decision.model
    if model is not None and refuses_model(status, content):
        replica.forget_model(model)
        return False
    return classify_upstream(status, content) is Verdict.FORWARD


def sse_error_event(message: str, last_chunk: bytes, code: str = "replica_failed") -> bytes:
    """An OpenAI-shaped error event and [DONE], starting a fresh event if the last was cut."""
    payload = error_json(502, message, code=code)
    separator = b"" if last_chunk.endswith(b"\n\n") else b"\n\n"
    return separator + f"data: {payload}\n\ndata: [DONE]\n\n".encode()
