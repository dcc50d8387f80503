"""`spec.model.adapters`: LoRA adapters every engine replica serves beside the base model, loaded
and unloaded at run time (no engine restart). How their files reach the pods is
llm_operator.builders.adapter_source; how they are loaded, llm_operator.controller.adapter_sync."""

from pydantic import Field, model_validator

from llm_operator.api.types import SpecModel, cel_rules

DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
ADAPTER_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9._]*[a-z0-9])?$"
ADAPTER_SOURCE_PATTERN = (
    rf"^(hf://[^/\s@]+/[^/\s@]+(@[^\s]+)?|pvc://{DNS_LABEL}(/[^\s]*)?|file:///[^\s]+)$"
)


class AdapterSpec(SpecModel):
    model_config = cel_rules(
        (
            "!has(self.revision) || self.source.startsWith('hf://')",
            "revision is for hf:// sources only",
        ),
    )

    name: str = Field(min_length=1, max_length=63, pattern=ADAPTER_NAME_PATTERN)
    """The name clients send as `model` to use this adapter (lower-case letters, digits, `-`,
    `.`, `_`); not the base model's served name."""
    source: str = Field(pattern=ADAPTER_SOURCE_PATTERN)
    """A PEFT adapter directory: hf://org/name[@revision] (fetched into the model cache),
    pvc://claim/path (the model's own claim, or copied into model.cacheVolumeClaim) or
    file:///path (inside the engine image)."""
    revision: str | None = Field(None, min_length=1)
    """The Hugging Face revision (branch, tag or commit) of an hf:// source; an `@revision` in the
    source wins."""

    @model_validator(mode="after")
    def _revision_for_hf_only(self) -> "AdapterSpec":
        if self.revision is not None and not self.source.startswith("hf://"):
            raise ValueError(f"adapter {self.name}: revision is for hf:// sources only")
        return self


def duplicate_names(adapters: list[AdapterSpec]) -> list[str]:
    """Adapter names declared more than once, in order."""
    seen: set[str] = set()
    duplicates = []
    for adapter in adapters:
        if adapter.name in seen and adapter.name not in duplicates:
            duplicates.append(adapter.name)
        seen.add(adapter.name)
    return duplicates
