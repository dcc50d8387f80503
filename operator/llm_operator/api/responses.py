"""`spec.responses`: where the engines keep the Responses API's stored responses
(docs/responses.md): each engine's own memory, or a Redis the whole fleet shares, so a follow-up
that lands on another replica (its own was restarted, scaled away, or is unhealthy) still finds
its conversation.

The Redis URL may hold a password, so it comes from a Secret, as the engines' environment
(`PAGEDOCK_RESPONSES_STORE`, which `pagedock serve` reads as its `--responses-store`): never in
the pod template, nor on a command line.
"""

from typing import Literal

from pydantic import Field, model_validator

from llm_operator.api.tenancy import RedisURLSecret, check_redis_secret
from llm_operator.api.types import SpecModel, cel_rules


class ResponsesSpec(SpecModel):
    model_config = cel_rules(
        (
            "self.store != 'redis' || has(self.redisURLSecret)",
            "responses.store redis needs responses.redisURLSecret (the Secret holding the URL)",
        ),
        (
            "self.store == 'redis' || !has(self.redisURLSecret)",
            "responses.redisURLSecret is for responses.store redis",
        ),
    )

    store: Literal["memory", "redis"] = "memory"
    """memory: each engine keeps its own (a follow-up that reaches another replica gets a 400);
    redis: one Redis for every engine, named by redisURLSecret. With more than one replica,
    use redis."""
    redis_url_secret: RedisURLSecret | None = Field(None, alias="redisURLSecret")
    """With store redis: the Secret holding the Redis URL."""
    ttl_seconds: int | None = Field(None, ge=0)
    """Seconds a stored response is kept (`--responses-store-ttl-s`; 0 = until deleted or
    evicted). Unset: the engine's default (86400)."""
    max_entries: int | None = Field(None, ge=1)
    """With store memory: responses each engine keeps at most, the least recently used going
    first (`--responses-store-max-entries`). Unset: the engine's default (10000)."""

    @model_validator(mode="after")
    def _redis_needs_its_secret(self) -> "ResponsesSpec":
        check_redis_secret(
            self.store, self.redis_url_secret, "responses.store", "responses.redisURLSecret"
        )
        return self
