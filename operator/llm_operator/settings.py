"""Operator settings, read from `PAGEDOCK_OPERATOR_*` / `PAGEDOCK_*_IMAGE` environment variables."""

import dataclasses
import os
from collections.abc import Mapping

DEFAULT_TAG = "0.1.0"
ENV_PREFIX = "PAGEDOCK_OPERATOR_"


@dataclasses.dataclass(frozen=True)
class OperatorSettings:
    namespaces: tuple[str, ...] = ()
    """Namespaces to watch; empty means the whole cluster."""
    engine_image: str = f"ghcr.io/pagedock/engine:{DEFAULT_TAG}"
    """Engine image for LLMDeployments that set no spec.image."""
    router_image: str = f"ghcr.io/pagedock/router:{DEFAULT_TAG}"
    """Router image for LLMDeployments that set no spec.router.image."""
    log_level: str = "INFO"
    """DEBUG, INFO, WARNING or ERROR."""
    peering_name: str = "pagedock"
    """kopf peering (leader election) name; empty runs standalone (one replica only)."""
    resync_seconds: float = 60.0
    """How often each LLMDeployment is reconciled even when nothing changed (drift repair)."""
    scrape_metrics: bool = True
    """Read the engines' /metrics into status (KV usage, prefix hit rate, queue depth)."""
    scrape_timeout_seconds: float = 2.0
    """Timeout of one engine metrics scrape."""
    liveness_port: int = 8081
    """Port of the operator's own /healthz endpoint (0 disables it)."""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "OperatorSettings":
        env = os.environ if environ is None else environ
        defaults = cls()
        namespaces = env.get(f"{ENV_PREFIX}NAMESPACES", "")
        return cls(
            namespaces=tuple(ns.strip() for ns in namespaces.split(",") if ns.strip()),
            engine_image=env.get("PAGEDOCK_ENGINE_IMAGE", defaults.engine_image),
            router_image=env.get("PAGEDOCK_ROUTER_IMAGE", defaults.router_image),
            log_level=env.get(f"{ENV_PREFIX}LOG_LEVEL", defaults.log_level).upper(),
            peering_name=env.get(f"{ENV_PREFIX}PEERING", defaults.peering_name),
            resync_seconds=float(env.get(f"{ENV_PREFIX}RESYNC_SECONDS", defaults.resync_seconds)),
            scrape_metrics=_flag(env.get(f"{ENV_PREFIX}SCRAPE_METRICS"), defaults.scrape_metrics),
            scrape_timeout_seconds=float(
                env.get(f"{ENV_PREFIX}SCRAPE_TIMEOUT_SECONDS", defaults.scrape_timeout_seconds)
            ),
            liveness_port=int(env.get(f"{ENV_PREFIX}LIVENESS_PORT", defaults.liveness_port)),
        )

    def with_overrides(self, **changes: object) -> "OperatorSettings":
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


def _flag(value: str | None, default: bool) -> bool:
    if value is None or value == "":
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}
