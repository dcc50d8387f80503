"""Operator settings, read from the environment through pagedock's options convention:
`PAGEDOCK_OPERATOR_<FIELD>`, except the images (`PAGEDOCK_IMAGE_REPOSITORY`, `PAGEDOCK_IMAGE_TAG`)
and the peering name (`PAGEDOCK_OPERATOR_PEERING`), the names the chart and manifests set.
Booleans take 1/true/yes/on or 0/false/no/off; anything else is an error.

The default images are `<repository>/<target>:<tag>`, one per Dockerfile target: `engine-cpu` for
LLMDeployments without GPUs, `engine-cuda` with GPUs, `router` (and `operator`, the chart's own).
"""

import dataclasses
from collections.abc import Mapping

from pagedock.options import from_env, option_meta

DEFAULT_REPOSITORY = "ghcr.io/pagedock"
DEFAULT_TAG = "0.1.0"
ENV_PREFIX = "PAGEDOCK_OPERATOR_"


@dataclasses.dataclass(frozen=True)
class OperatorSettings:
    namespaces: tuple[str, ...] = ()
    """Namespaces to watch (comma-separated); empty means the whole cluster."""
    image_repository: str = dataclasses.field(
        default=DEFAULT_REPOSITORY, metadata=option_meta(env="PAGEDOCK_IMAGE_REPOSITORY")
    )
    """Registry path of the pagedock images (engine-cpu, engine-cuda, router, operator)."""
    image_tag: str = dataclasses.field(
        default=DEFAULT_TAG, metadata=option_meta(env="PAGEDOCK_IMAGE_TAG")
    )
    """Tag of the pagedock images."""
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
    autoscale_interval_seconds: float = 1.0
    """How often the built-in autoscaler polls the routers' demand and decides (mode builtin)."""
    liveness_port: int = 8081
    """Port of the operator's own /healthz endpoint (0 disables it)."""
    metrics_port: int = 8080
    """Port of the operator's own /metrics, in Prometheus's text format (0 disables it)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "log_level", self.log_level.upper())  # frozen: set once, here

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "OperatorSettings":
        """The settings the environment gives (os.environ when `environ` is None); OptionError
        (a ValueError naming the variable) when a value cannot be read."""
        return from_env(cls, ENV_PREFIX, environ)

    def image(self, target: str) -> str:
        """The default image of one Dockerfile target: engine-cpu, engine-cuda or router."""
        return f"{self.image_repository.rstrip('/')}/{target}:{self.image_tag}"

    def with_overrides(self, **changes: object) -> "OperatorSettings":
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]
