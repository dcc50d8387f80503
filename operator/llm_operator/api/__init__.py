"""The `LLMDeployment` API: the spec's pydantic models and the CRD generated from them."""
