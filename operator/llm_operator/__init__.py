"""The pagedock Kubernetes operator: reconciles `LLMDeployment` resources (torch-free)."""

GROUP = "pagedock.dev"
VERSION = "v1alpha1"
KIND = "LLMDeployment"
PLURAL = "llmdeployments"
SINGULAR = "llmdeployment"
SHORT_NAMES = ("llmd",)
API_VERSION = f"{GROUP}/{VERSION}"
