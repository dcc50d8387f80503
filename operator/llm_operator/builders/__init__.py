"""Pure builders: an LLMDeployment spec in, the child objects out (no API calls, no kopf)."""

from llm_operator.builders.children import build_children, child_refs
from llm_operator.builders.context import BuildContext

__all__ = ["BuildContext", "build_children", "child_refs"]
