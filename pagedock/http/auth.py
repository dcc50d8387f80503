"""The API-key guard of the engine's server and the router: `Authorization: Bearer KEY`.

A missing, malformed or wrong key is a 401 in OpenAI's shape with `WWW-Authenticate: Bearer`
(never FastAPI's own 403), so OpenAI clients raise their AuthenticationError.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, Mapping
from typing import Annotated, Any

from fastapi import Depends
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from pagedock.http.errors import APIError

INVALID_API_KEY_MESSAGE = "missing or invalid API key: send `Authorization: Bearer <key>`"

# auto_error=False: a missing header is our 401 in OpenAI's shape, not FastAPI's 403.
_bearer = HTTPBearer(auto_error=False, description="The API key, when one is set.")


def bearer_key(headers: Mapping[str, str]) -> str | None:
    """The credential of an `Authorization: Bearer KEY` header; None without one."""
    scheme, _, credential = headers.get("authorization", "").partition(" ")
    return credential.strip() if scheme.lower() == "bearer" and credential.strip() else None


def check_api_key(expected: str | None, given: str | None) -> None:
    """Raise the 401 unless `given` is `expected` (None: no key is needed)."""
    if expected is None:
        return
    # Constant-time comparison: response timing must not reveal how much of a guess matched.
    if not hmac.compare_digest((given or "").encode(), expected.encode()):
        raise APIError(
            401,
            INVALID_API_KEY_MESSAGE,
            code="invalid_api_key",
            headers={"WWW-Authenticate": "Bearer"},
        )


def api_key_guard(expected: str | None) -> Callable[..., Awaitable[None]]:
    """A FastAPI dependency that lets through only requests bearing `expected` (when set)."""

    async def require_api_key(
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    ) -> None:
        check_api_key(expected, None if credentials is None else credentials.credentials)

    return require_api_key


def docs_urls(expected: str | None) -> dict[str, Any]:
    """FastAPI's openapi_url, docs_url and redoc_url keywords: the schema and docs pages are open
    routes that map the whole API, so they are off when clients need a key."""
    if expected is None:
        return {}
    return {"openapi_url": None, "docs_url": None, "redoc_url": None}
