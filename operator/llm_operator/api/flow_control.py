"""`spec.router.flowControl`: the router's flow queues (docs/tenants.md, "Flow control in the
router"); each field is one `pagedock route` flag, passed only when set (unset: the router's
default)."""

from pydantic import Field

from llm_operator.api.types import SpecModel


class FlowControlSpec(SpecModel):
    max_inflight_per_replica: int | None = Field(None, ge=0)
    """Requests under way per ready engine replica before new ones wait in the router's flow
    queues: priority bands, fair between tenants (`--max-inflight-per-replica`); 0 = none wait
    in the router (the engines' queues order them). Unset: the router's default (0)."""
    queue_size: int | None = Field(None, ge=1)
    """Requests one priority band may hold waiting; past it, 429 fleet_saturated
    (`--flow-queue-size`). Unset: the router's default (1024)."""
    queue_ttl_seconds: float | None = Field(None, gt=0, alias="queueTTLSeconds")
    """Seconds a request may wait in a flow queue before a 429 queue_timeout
    (`--flow-queue-ttl-s`). Unset: the router's default (30)."""
    starvation_seconds: float | None = Field(None, gt=0)
    """A band that has gone this long without a slot gets the next one, once, before the
    higher bands (`--flow-starvation-s`, the bound on starvation). Unset: the router's
    default (10)."""
