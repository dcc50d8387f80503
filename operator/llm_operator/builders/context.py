"""What every builder needs: the owner's identity, its validated spec and the operator settings."""

import dataclasses

from llm_operator.api.spec import LLMDeploymentSpec
from llm_operator.builders.model_source import ModelSource, resolve_model_source
from llm_operator.drain_timing import DrainObservation, DrainTiming, drain_timing
from llm_operator.names import ENGINE_PORT, ROUTER_PORT, engine_name, router_name
from llm_operator.settings import OperatorSettings


@dataclasses.dataclass(frozen=True)
class BuildContext:
    name: str
    namespace: str
    spec: LLMDeploymentSpec
    settings: OperatorSettings
    claim_shared: bool = False
    """model.cacheVolumeClaim is ReadWriteMany or ReadOnlyMany (the reconciler reads the claim),
    so router pods on any node may mount it beside the engines."""
    model_claim_shared: bool = False
    """The claim of a `pvc://` model source is ReadWriteMany or ReadOnlyMany, so the router may
    mount it for the tokenizer; otherwise it routes by load alone (never mounting a RWO claim)."""
    drain_observation: DrainObservation | None = None
    """What the engines reported of their longest requests, as the engine pod template is built
    from it: the reconciler carries the live Deployment's unless the template changes for another
    reason (llm_operator/drain_timing.py)."""

    @property
    def drain_timing(self) -> DrainTiming:
        spec = self.spec
        return drain_timing(
            spec.drain_timeout_seconds, spec.max_drain_timeout_seconds, self.drain_observation
        )

    @property
    def model_source(self) -> ModelSource:
        model = self.spec.model
        return resolve_model_source(model.source, model.revision)

    @property
    def served_model_name(self) -> str:
        return self.spec.model.name or self.model_source.default_served_name

    @property
    def engine_image(self) -> str:
        """spec.image, else the operator's engine-cuda image with GPUs and engine-cpu without."""
        target = "engine-cuda" if self.spec.resources.gpus else "engine-cpu"
        return self.spec.image or self.settings.image(target)

    @property
    def router_image(self) -> str:
        return self.spec.router.image or self.settings.image("router")

    @property
    def engine_service_host(self) -> str:
        return f"{engine_name(self.name)}.{self.namespace}.svc"

    def endpoint(self) -> str:
        """The base URL clients use: the Ingress when it has a host, else the in-cluster Service."""
        ingress = self.spec.ingress
        if ingress.enabled and ingress.host:
            scheme = "https" if ingress.tls_secret_name else "http"
            return f"{scheme}://{ingress.host}{ingress.path.rstrip('/')}"
        if self.spec.router.enabled:
            return f"http://{router_name(self.name)}.{self.namespace}.svc:{ROUTER_PORT}"
        return f"http://{self.engine_service_host}:{ENGINE_PORT}"
