"""Names and labels of an LLMDeployment's children: one place, so builders and pruning agree."""

MANAGED_BY = "pagedock-operator"
OWNER_LABEL = "pagedock.dev/llmdeployment"
CONFIG_HASH_ANNOTATION = "pagedock.dev/config-hash"
LAST_APPLIED_ANNOTATION = "pagedock.dev/last-applied"
DRAIN_OBSERVATION_ANNOTATION = "pagedock.dev/drain-observation"
TENANTS_HASH_ANNOTATION = "pagedock.dev/tenants-hash"
ENGINE_PORT = 8000
ROUTER_PORT = 8080
PICKER_PORT = 9002  # the router's endpoint picker (gRPC ext_proc), the Inference Extension's usual

# NOTE: a Service name is a DNS label (<= 63 chars); the longest suffix is "-engine".
MAX_NAME_LENGTH = 63 - len("-engine")


def engine_name(name: str) -> str:
    return f"{name}-engine"


def router_name(name: str) -> str:
    return f"{name}-router"


def tenants_name(name: str) -> str:
    """The ConfigMap of the tenants file (spec.tenancy)."""
    return f"{name}-tenants"


def picker_name(name: str) -> str:
    """The Service of the router's endpoint picker port (an InferencePool's endpointPickerRef)."""
    return f"{name}-picker"


def selector_labels(name: str, component: str) -> dict[str, str]:
    """The immutable labels that select one component's pods."""
    return {
        "app.kubernetes.io/name": "pagedock",
        "app.kubernetes.io/instance": name,
        "app.kubernetes.io/component": component,
    }


def child_labels(name: str, component: str) -> dict[str, str]:
    return {
        **selector_labels(name, component),
        "app.kubernetes.io/managed-by": MANAGED_BY,
        OWNER_LABEL: name,
    }


def selector_string(labels: dict[str, str]) -> str:
    """A label selector in the string form that the scale subresource reports."""
    return ",".join(f"{key}={value}" for key, value in sorted(labels.items()))
