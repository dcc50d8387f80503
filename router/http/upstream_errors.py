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

A 404 in the error shape to a request that names a model means that replica does not serve the
model (an adapter unloaded since its list was read): `refuses_model`, and the proxy tries the
next replica that lists it.

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


def refuses_model(status: int, body: bytes) -> bool:
    """Is this a generation endpoint's 404 (the only one it has: the model the request names is
    not served there; pagedock's `model_not_found`, vLLM's NotFoundError)?"""
    return status == 404 and _error_object(body) is not None


def _is_request_error(body: bytes) -> bool:
    """True for an error body (_error_object), unless its code says the engine itself is dead."""
    error = _error_object(body)
    return error is not None and error.get("code") != "engine_dead"


def _error_object(body: bytes) -> dict[str, object] | None:
    """The error of OpenAI's shape {"error": {"message": ...}} (pagedock, newer vLLM) or vLLM's
    older {"object": "error", "message": ...}; None for any other body."""
    try:
        parsed = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(parsed, dict):
        return None
    error = parsed.get("error", parsed if parsed.get("object") == "error" else None)
    if not isinstance(error, dict) or not isinstance(error.get("message"), str):
        return None
    return error
