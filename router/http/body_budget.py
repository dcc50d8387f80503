"""BodyBudget: the bytes of request bodies the router keeps in memory at once, bounded.

The router reads a generation request's body whole (it routes on the prompt) and keeps it until
the request ends: held while no replica is ready (router/http/hold_queue.py), parsed, forwarded,
and for a stream it can resume, kept to resume it with. Counting requests bounds none of that (40
held 8 MB bodies took a router to 3.5 GB), so their bytes are counted: a body that would take the
total past --max-buffered-body-bytes gets a 503 (`router_memory_full`, Retry-After) at once,
before the rest of it is read or any of it parsed. One client's big bodies then cost the others
at most the budget, never the router. A sixteenth of the budget is kept for small bodies (up to
SMALL_BODY_BYTES, what chat and completion requests are): large bodies announced or sent to fill
the budget (eight 8 MiB bodies filled 64 MiB) leave the fleet's ordinary requests their room.

What a body costs beyond its bytes is kept small where it lasts: a held request is its raw body
(parsed once released), a parsed request is dropped once it is routed, and a resumable stream
keeps the body it was sent with, not its parse. The parse itself (up to ~10x the body, for a chat
of many short messages) lasts while the body is routed, at most two large bodies at once (the
router's prompt pool).

Each HTTP request gets a lease (BodyLeases, an ASGI middleware, puts it in the request's scope)
that grows as its body is read and is given back whole when the request's ASGI call ends, however
it ends: its response sent (a stream's last chunk included), an error, a client gone, a timeout.
The endpoint picker (router/picker/endpoint_picker.py) takes one per ext_proc stream for the body
it collects, given back once the body is answered or the stream ends.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from pagedock.limits import SMALL_BODY_BYTES, largest_body_within

LEASE_SCOPE_KEY = "pagedock.body_lease"


class BodyBudget:
    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.used_bytes = 0
        """The bodies of the requests under way (read, held, parsed or forwarded), in bytes."""

    def limit_for(self, num_bytes: int) -> int:
        """The most `used_bytes` may reach for a body of `num_bytes` to be taken."""
        return (
            self.max_bytes if num_bytes <= SMALL_BODY_BYTES else largest_body_within(self.max_bytes)
        )

    def lease(self) -> BodyLease:
        return BodyLease(self)

    def full_message(self, num_bytes: int) -> str:
        """Why a body that has `num_bytes` so far gets no room (its 503 `router_memory_full`)."""
        return (
            f"the router's memory for request bodies is full: {self.used_bytes} of its "
            f"{self.max_bytes} bytes (--max-buffered-body-bytes) hold requests under way, and "
            f"this request's body needs at least {num_bytes}"
        )


class BodyLease:
    """One request's share of the budget: the bytes of its body read so far (or announced by its
    Content-Length)."""

    def __init__(self, budget: BodyBudget) -> None:
        self.budget = budget
        self.num_bytes = 0

    def grow_to(self, num_bytes: int) -> bool:
        """Hold `num_bytes` of the budget in all; False, taking nothing more, past the budget."""
        extra = num_bytes - self.num_bytes
        if extra <= 0:
            return True
        if self.budget.used_bytes + extra > self.budget.limit_for(num_bytes):
            return False
        self.budget.used_bytes += extra
        self.num_bytes = num_bytes
        return True

    def release(self) -> None:
        self.budget.used_bytes -= self.num_bytes
        self.num_bytes = 0


class BodyLeases:
    """ASGI middleware: a lease for each HTTP request, given back when the request's call ends."""

    def __init__(self, app: ASGIApp, budget: BodyBudget) -> None:
        self.app = app
        self.budget = budget

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        lease = scope[LEASE_SCOPE_KEY] = self.budget.lease()
        try:
            await self.app(scope, receive, send)
        finally:
            lease.release()


def lease_of(scope: Scope) -> BodyLease:
    """The lease BodyLeases gave the request."""
    lease: BodyLease = scope[LEASE_SCOPE_KEY]
    return lease
