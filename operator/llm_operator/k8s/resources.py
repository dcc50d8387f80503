"""The kinds the operator manages, and their REST paths (among them the LLMDeployment lists that
the resync and the autoscaler read)."""

import dataclasses

from llm_operator import API_VERSION, KIND, PLURAL


@dataclasses.dataclass(frozen=True)
class ResourceKind:
    api_version: str
    kind: str
    plural: str
    crd: str | None = None
    """The CRD that serves this kind, for kinds a cluster may lack (the API then answers 404)."""

    def collection_path(self, namespace: str) -> str:
        prefix = "/api" if "/" not in self.api_version else "/apis"
        return f"{prefix}/{self.api_version}/namespaces/{namespace}/{self.plural}"

    def object_path(self, namespace: str, name: str, subresource: str | None = None) -> str:
        path = f"{self.collection_path(namespace)}/{name}"
        return f"{path}/{subresource}" if subresource else path


LLM_DEPLOYMENT = ResourceKind(API_VERSION, KIND, PLURAL)
INFERENCE_POOL = ResourceKind(
    "inference.networking.k8s.io/v1",
    "InferencePool",
    "inferencepools",
    "inferencepools.inference.networking.k8s.io",
)
HTTP_ROUTE = ResourceKind(
    "gateway.networking.k8s.io/v1",
    "HTTPRoute",
    "httproutes",
    "httproutes.gateway.networking.k8s.io",
)
POD = ResourceKind("v1", "Pod", "pods")  # read only: the engine pods' state goes into status
SECRET = ResourceKind("v1", "Secret", "secrets")  # read only: the engines' API key (adapters)
KINDS = {
    kind.kind: kind
    for kind in (
        ResourceKind("apps/v1", "Deployment", "deployments"),
        ResourceKind("v1", "Service", "services"),
        ResourceKind("v1", "ServiceAccount", "serviceaccounts"),
        ResourceKind("v1", "ConfigMap", "configmaps"),
        ResourceKind("rbac.authorization.k8s.io/v1", "Role", "roles"),
        ResourceKind("rbac.authorization.k8s.io/v1", "RoleBinding", "rolebindings"),
        ResourceKind("networking.k8s.io/v1", "Ingress", "ingresses"),
        ResourceKind("networking.k8s.io/v1", "NetworkPolicy", "networkpolicies"),
        ResourceKind("policy/v1", "PodDisruptionBudget", "poddisruptionbudgets"),
        ResourceKind("autoscaling/v2", "HorizontalPodAutoscaler", "horizontalpodautoscalers"),
        ResourceKind("keda.sh/v1alpha1", "ScaledObject", "scaledobjects"),
        ResourceKind("batch/v1", "Job", "jobs"),
        ResourceKind("v1", "PersistentVolumeClaim", "persistentvolumeclaims"),
        INFERENCE_POOL,
        HTTP_ROUTE,
    )
}


def kind_of(obj: dict) -> ResourceKind:
    return KINDS[obj["kind"]]


def collection_paths(namespaces: tuple[str, ...]) -> list[tuple[str | None, str]]:
    """(namespace, LLMDeployment list path): one per watched namespace, or the cluster's."""
    if namespaces:
        return [(ns, LLM_DEPLOYMENT.collection_path(ns)) for ns in namespaces]
    return [(None, f"/apis/{API_VERSION}/{PLURAL}")]
