"""What a replica's non-2xx answer says about the replica: a pure decision, used by the proxy
and the stream failover.

    4xx (but 429)                                -> the request's fault: forwarded, not retried
    429                                          -> that replica is busy: tried elsewhere
    500 with an OpenAI-shaped error body         -> this request failed (a pagedock engine's
                                                    `engine_error`, vLLM's error body):
                                                    forwarded, not retried, the replica stays
                                                    healthy
    503 (engine_dead, draining), 502, 504, any
    other 5xx, a 500 without a readable error    -> the replica failed: marked unhealthy, the
    body                                            request tried elsewhere

NOTE: a 500 with an error body means the engine was alive enough to answer this request in its
API's shape, so the failure is the request's; retrying a poison request on every replica and
ejecting each one would let one bad client empty the healthy set. A replica that really is broken
fails its health checks and leaves the set that way.
"""

from __future__ import annotations

import enum
import json


class Verdict(enum.Enum):
    FORWARD = "forward"
    """The client gets this answer; the replica stays a candidate."""
    TRY_ELSEWHERE = "try_elsewhere"
    """Another replica may serve it; this one stays a candidate (it is busy, not broken)."""
    REPLICA_FAILED = "replica_failed"
    """Another replica may serve it; this one leaves the candidate set until a health check."""


def classify_upstream(status: int, body: bytes) -> Verdict:
    """The verdict on a replica's answer with HTTP `status` and (whole) `body`."""
    if status < 400:
        return Verdict.FORWARD
    if status == 429:
        return Verdict.TRY_ELSEWHERE
    if status < 500:
        return Verdict.FORWARD
    if status == 500 and _is_request_error(body):
        return Verdict.FORWARD
    return Verdict.REPLICA_FAILED


def _is_request_error(body: bytes) -> bool:
    """True for OpenAI's error shape {"error": {"message": ...}} (pagedock, newer vLLM) or vLLM's
    older {"object": "error", "message": ...}, unless its code says the engine itself is dead."""
    try:
        parsed = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return False
    if not isinstance(parsed, dict):
        return False
    error = parsed.get("error", parsed if parsed.get("object") == "error" else None)
    if not isinstance(error, dict) or not isinstance(error.get("message"), str):
        return False
    return error.get("code") != "engine_dead"
