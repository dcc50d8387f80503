"""`spec.model`: the base model's source and cache, and the LoRA adapters served beside it."""

from pydantic import Field, model_validator

from llm_operator.api.adapters import DNS_LABEL, AdapterSpec, duplicate_names
from llm_operator.api.types import Quantity, SpecModel
from pagedock.limits import DEFAULT_MODEL

MAX_ADAPTERS = 256
BUILTIN_RE = r"[a-z0-9][a-z0-9._-]*"
MODEL_SOURCE_PATTERN = (
    rf"^({BUILTIN_RE}|hf://[^/\s]+/[^\s]+|pvc://{DNS_LABEL}(/[^\s]*)?|file:///[^\s]+)$"
)


class ModelSpec(SpecModel):
    source: str = Field(DEFAULT_MODEL, pattern=MODEL_SOURCE_PATTERN)
    """Where the weights come from: a built-in name, hf://org/name, pvc://claim/path or file:///path."""
    name: str | None = Field(None, min_length=1, max_length=253)
    """The served model name clients send as `model`; defaults to the source's last path part."""
    revision: str | None = None
    """The Hugging Face revision (branch, tag or commit) for hf:// sources (env HF_REVISION)."""
    cache_volume_claim: str | None = Field(None, pattern=rf"^{DNS_LABEL}$")
    """A PersistentVolumeClaim (ReadWriteMany for engines on several nodes) that one Job fills with
    an hf:// model before the engines mount it read-only; unset, every pod downloads the model."""
    cache_size: Quantity = "20Gi"
    """Size of each engine pod's emptyDir cache for an hf:// source without cacheVolumeClaim
    (requested and limited as ephemeral-storage, with 1Gi for /tmp; 2Gi for other sources)."""
    adapters: list[AdapterSpec] = Field(
        default_factory=list,
        max_length=MAX_ADAPTERS,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    """LoRA adapters (PEFT format) every engine replica serves, loaded and unloaded at run time:
    adding or removing one restarts no pod. Declaring the first one turns LoRA on in the engines
    (a template change: one rolling restart); see docs/lora.md."""

    @model_validator(mode="after")
    def _unique_adapter_names(self) -> "ModelSpec":
        if duplicates := duplicate_names(self.adapters):
            raise ValueError(f"model.adapters: the name {duplicates[0]} is declared twice")
        return self
