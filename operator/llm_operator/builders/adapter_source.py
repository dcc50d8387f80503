"""Where each LoRA adapter's files come from, and the path the engines load it by.

Adapters reach the engine pods only through what the pods already mount, so that declaring one
never changes the pod template (and never restarts a pod):

hf://org/name[@rev]   engines that download          the engine fetches it into its hub cache
                      (no offline cache claim)       when it is loaded;  hf://org/name@rev
                      engines on the read-only       a Job downloads it into the claim first
                      cache claim (hf:// model +     (the engines are offline);  hf://org/name@rev
                      model.cacheVolumeClaim)
pvc://claim/path      the model's own pvc:// claim   already mounted;  /models/claim/path
                      engines on the cache claim     a Job copies it into the claim;
                                                     /cache/huggingface/pagedock-adapters/<key>
                      otherwise                      an invalid spec (adapter_problem)
file:///path          inside the engine image        /path

An hf:// adapter's revision (spec or `@revision`) goes into its path; without one the engine takes
the repo's default branch (never HF_REVISION, which is the base model's).
"""

import dataclasses
import hashlib
from typing import Literal

from llm_operator.api.adapters import AdapterSpec
from llm_operator.builders.context import BuildContext
from llm_operator.builders.model_cache import HF_HOME, downloads_once

COPIES_DIR = f"{HF_HOME}/pagedock-adapters"
Delivery = Literal["none", "download", "copy"]


@dataclasses.dataclass(frozen=True)
class AdapterSource:
    name: str
    lora_path: str
    """What the engines load: `lora_path` of POST /v1/load_lora_adapter."""
    delivery: Delivery = "none"
    """download: a Job fetches an hf:// adapter into the cache claim; copy: a Job copies a pvc://
    adapter there; none: the engines read it where it is (or fetch it themselves)."""
    claim: str | None = None
    """The claim a copied adapter comes from."""
    sub_path: str = ""
    """Its directory inside that claim."""
    key: str = ""
    """A hash of name, source and claim: a new source gets a new Job (and copy folder)."""


def lora_enabled(ctx: BuildContext) -> bool:
    """LoRA is on in the engines: adapters are declared, or engine.maxLoras is set."""
    return bool(ctx.spec.model.adapters) or ctx.spec.engine.max_loras is not None


def adapter_sources(ctx: BuildContext) -> list[AdapterSource]:
    return [resolve_adapter(ctx, adapter) for adapter in ctx.spec.model.adapters]


def resolve_adapter(ctx: BuildContext, adapter: AdapterSpec) -> AdapterSource:
    key = _key(ctx, adapter)
    source = adapter.source
    if source.startswith("hf://"):
        pinned = source if "@" in source or not adapter.revision else f"{source}@{adapter.revision}"
        delivery: Delivery = "download" if downloads_once(ctx) else "none"
        return AdapterSource(adapter.name, pinned, delivery, key=key)
    if source.startswith("pvc://"):
        claim, _, sub_path = source.removeprefix("pvc://").partition("/")
        if claim == ctx.model_source.claim_name:
            path = f"{ctx.model_source.volume_mounts()[0]['mountPath']}/{sub_path}".rstrip("/")
            return AdapterSource(adapter.name, path, key=key)
        copy = f"{COPIES_DIR}/{adapter.name}-{key}"
        return AdapterSource(adapter.name, copy, "copy", claim, sub_path.strip("/"), key)
    return AdapterSource(adapter.name, source.removeprefix("file://"), key=key)


def adapter_problem(ctx: BuildContext) -> str | None:
    """Why the adapters cannot be served as declared (an InvalidSpec message), or None."""
    for adapter in ctx.spec.model.adapters:
        if adapter.name == ctx.served_model_name:
            return (
                f"spec.model.adapters: {adapter.name} is the base model's served name; "
                "give the adapter another name"
            )
        resolved = resolve_adapter(ctx, adapter)
        if resolved.delivery == "copy" and not downloads_once(ctx):
            return (
                f"spec.model.adapters: {adapter.name} comes from claim {resolved.claim}, which "
                "the engine pods do not mount: put it on the model's own pvc:// claim, or use an "
                "hf:// model with model.cacheVolumeClaim (the adapter is then copied there)"
            )
    return None


def _key(ctx: BuildContext, adapter: AdapterSpec) -> str:
    text = "\n".join(
        [
            adapter.name,
            adapter.source,
            adapter.revision or "",
            ctx.spec.model.cache_volume_claim or "",
        ]
    )
    return hashlib.sha256(text.encode()).hexdigest()[:8]
