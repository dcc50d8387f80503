"""The `LLMDeployment` API: the spec's and the status's pydantic models, the parsing of a spec, and
the CRD generated from them."""
