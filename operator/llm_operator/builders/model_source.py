"""Model source URIs -> the `--model` argument and the volumes that make it readable in a pod.

smollm2-135m-instruct      built into the engine image          --model smollm2-135m-instruct
hf://org/name              downloaded into the cache volume     --model hf://org/name
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


def resolve_model_source(source: str) -> ModelSource:
    """Parse a spec.model.source (already pattern-checked by the spec model)."""
    if source.startswith("hf://"):
        return ModelSource(source, _last_part(source))
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
