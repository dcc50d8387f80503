"""The fleet's internal key: what a router shows an engine for what no client may do.

Two things an engine serves only its own routers, never clients (not even clients with the API
key): a request body carrying `continuation` (a resumed stream; replaying it costs the engine
work a client could aim at it, docs/router.md) and GET /v1/kv/events (every cached block hash and
the hash root: what other tenants' prompts share). Engines and routers read the same
`--internal-api-key` (PAGEDOCK_INTERNAL_API_KEY); the router sends it in INTERNAL_KEY_HEADER on
its continuations and event subscriptions only, and never forwards a client's header of that name.

Without an internal key (a laptop's `pagedock serve`), both stay open to whoever the API key (if
any) lets in, as before: set one wherever clients other than the fleet's routers reach the
engines.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable

from fastapi import Request

from pagedock.http.errors import APIError

INTERNAL_KEY_HEADER = "x-pagedock-internal-key"
"""The request header that carries the internal key (the API key's `Authorization` is apart)."""


def internal_key_headers(key: str | None) -> dict[str, str]:
    """The header a router adds to its own continuations and event subscriptions (none without
    a key)."""
    return {INTERNAL_KEY_HEADER: key} if key else {}


def has_internal_key(expected: str | None, request: Request) -> bool:
    """Does the request carry the internal key? (Always, when none is set.)"""
    if expected is None:
        return True
    given = request.headers.get(INTERNAL_KEY_HEADER) or ""
    # Constant-time comparison: response timing must not reveal how much of a guess matched.
    return hmac.compare_digest(given.encode(), expected.encode())


def check_continuation_allowed(expected: str | None, request: Request) -> None:
    """A 403 for a continuation that does not come from one of the fleet's routers."""
    if not has_internal_key(expected, request):
        raise APIError(
            403,
            "`continuation` is for pagedock's router only (its in-flight failover): send it with "
            f"the fleet's internal key in the {INTERNAL_KEY_HEADER} header",
            param="continuation",
            code="continuation_not_allowed",
        )


def internal_key_guard(expected: str) -> Callable[[Request], Awaitable[None]]:
    """A FastAPI dependency for a route of the routers' only (GET /v1/kv/events): a 401 unless
    the request bears the internal key (the API key alone is not enough)."""

    async def require_internal_key(request: Request) -> None:
        if not has_internal_key(expected, request):
            raise APIError(
                401,
                "missing or invalid internal key: this route is for the fleet's routers, which "
                f"send it in the {INTERNAL_KEY_HEADER} header",
                code="invalid_internal_key",
            )

    return require_internal_key
