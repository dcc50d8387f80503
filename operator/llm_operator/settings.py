"""Operator settings, read from the environment through pagedock's options convention:
`PAGEDOCK_OPERATOR_<FIELD>`, except the default images (`PAGEDOCK_ENGINE_IMAGE`,
`PAGEDOCK_ROUTER_IMAGE`) and the peering name (`PAGEDOCK_OPERATOR_PEERING`), the names the chart
and manifests set. Booleans take 1/true/yes/on or 0/false/no/off; anything else is an error."""

import dataclasses
from collections.abc import Mapping

from pagedock.options import from_env, option_meta

DEFAULT_TAG = "0.1.0"
ENV_PREFIX = "PAGEDOCK_OPERATOR_"


@dataclasses.dataclass(frozen=True)
class OperatorSettings:
    namespaces: tuple[str, ...] = ()
    """Namespaces to watch (comma-separated); empty means the whole cluster."""
    engine_image: str = dataclasses.field(
        default=f"ghcr.io/pagedock/engine:{DEFAULT_TAG}",
        metadata=option_meta(env="PAGEDOCK_ENGINE_IMAGE"),
    )
    """Engine image for LLMDeployments that set no spec.image."""
    router_image: str = dataclasses.field(
        default=f"ghcr.io/pagedock/router:{DEFAULT_TAG}",
        metadata=option_meta(env="PAGEDOCK_ROUTER_IMAGE"),
    )
    """Router image for LLMDeployments that set no spec.router.image."""
    log_level: str = "INFO"
    """DEBUG, INFO, WARNING or ERROR (any case)."""
    peering_name: str = dataclasses.field(
        default="pagedock", metadata=option_meta(env=f"{ENV_PREFIX}PEERING")
    )
    """kopf peering (leader election) name; empty runs standalone (one replica only)."""
    resync_seconds: float = 60.0
    """How often each LLMDeployment is reconciled even when nothing changed (drift repair)."""
    scrape_metrics: bool = True
    """Read the engines' /metrics into status (KV usage, prefix hit rate, queue depth)."""
    scrape_timeout_seconds: float = 2.0
    """Timeout of one engine metrics scrape."""
    scraper_namespaces: tuple[str, ...] = ("monitoring",)
    """Namespaces whose pods the engines' NetworkPolicy admits to port 8000 for /metrics
    (Prometheus; the chart adds the operator's own namespace); empty admits the router only."""
    liveness_port: int = 8081
    """Port of the operator's own /healthz endpoint (0 disables it)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "log_level", self.log_level.upper())  # frozen: set once, here

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "OperatorSettings":
        """The settings the environment gives (os.environ when `environ` is None); OptionError
        (a ValueError naming the variable) when a value cannot be read."""
        return from_env(cls, ENV_PREFIX, environ)

    def with_overrides(self, **changes: object) -> "OperatorSettings":
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]
