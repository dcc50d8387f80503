"""ResponsesConfig: how the router follows the Responses API's conversations (docs/router.md), a
base of RouterConfig (router/config.py), so each field is a `pagedock route` flag and a
`PAGEDOCK_*` variable."""

from __future__ import annotations

from dataclasses import dataclass

from pagedock.errors import ConfigError


@dataclass
class ResponsesConfig:
    response_owners_max_entries: int = 100_000
    """Response ids whose replica the router remembers (the least recently used goes first), so a
    follow-up (`previous_response_id`) goes where its conversation's KV blocks are; about 200
    bytes each. 0 = none remembered: follow-ups are routed by the policy."""
    response_owners_ttl_s: float = 86_400.0
    """Seconds a response id's replica is remembered (as the engines' --responses-store-ttl-s);
    0 = until evicted."""

    def _check_response_owners(self) -> None:
        if self.response_owners_max_entries < 0:
            raise ConfigError(
                "response_owners_max_entries must be 0 or more, got "
                f"{self.response_owners_max_entries}"
            )
        if self.response_owners_ttl_s < 0:
            raise ConfigError(
                f"response_owners_ttl_s must be 0 or more, got {self.response_owners_ttl_s}"
            )
