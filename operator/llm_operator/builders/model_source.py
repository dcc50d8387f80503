"""Model source URIs -> the `--model` argument and the volumes that make it readable in a pod.

smollm2-135m-instruct      built into the engine image          --model smollm2-135m-instruct
hf://org/name[@rev]        downloaded into the cache volume     --model hf://org/name[@rev]
                           (by the engine, into $HF_HOME; the router fetches the tokenizer only)
pvc://claim/sub/path       the claim mounted read-only at /models/claim
                                                                --model /models/claim/sub/path
file:///abs/path           a path inside the image              --model /abs/path
"""

import dataclasses
from typing import Any

MODELS_MOUNT = "/models"


@dataclasses.dataclass(frozen=True)
class ModelSource:
    model_arg: str
    default_served_name: str
    claim_name: str | None = None

    def volumes(self) -> list[dict[str, Any]]:
        if self.claim_name is None:
            return []
        claim = {"claimName": self.claim_name, "readOnly": True}
        return [{"name": "model", "persistentVolumeClaim": claim}]

    def volume_mounts(self) -> list[dict[str, Any]]:
        if self.claim_name is None:
            return []
        mount_path = f"{MODELS_MOUNT}/{self.claim_name}"
        return [{"name": "model", "mountPath": mount_path, "readOnly": True}]


def resolve_model_source(source: str, revision: str | None = None) -> ModelSource:
    """Parse a spec.model.source (already pattern-checked by the spec model).

    An hf:// source carries spec.model.revision as `@revision` (one written in the source wins),
    so the router fetches the tokenizer of the same revision as the engines.
    """
    if source.startswith("hf://"):
        repo, at, _ = source.partition("@")
        model_arg = source if at or not revision else f"{source}@{revision}"
        return ModelSource(model_arg, _last_part(repo))
    if source.startswith("pvc://"):
        claim, _, sub_path = source.removeprefix("pvc://").partition("/")
        model_path = f"{MODELS_MOUNT}/{claim}/{sub_path}".rstrip("/")
        return ModelSource(model_path, _last_part(model_path), claim_name=claim)
    if source.startswith("file://"):
        path = source.removeprefix("file://")
        return ModelSource(path, _last_part(path))
    return ModelSource(source, source)


def _last_part(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]
