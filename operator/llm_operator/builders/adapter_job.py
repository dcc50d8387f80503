"""The Job that puts one LoRA adapter into the model cache claim, where the engine pods (which
mount it read-only and offline) load it from; builders/adapter_source.py says when one is needed.

download  an hf:// adapter's adapter_config.json and adapter_model.safetensors into the hub cache
          of the claim ($HF_HOME/hub), the layout the engines' hf:// resolver reads offline
copy      a pvc:// adapter's directory into $HF_HOME/pagedock-adapters/<name>-<key>, by way of a
          temporary folder renamed when complete (an engine never sees half an adapter)
One Job per adapter and source (`<name>-adapter-<key>`; Jobs are immutable): a new source gets a
new Job, and the Jobs of adapters no longer declared are deleted (controller/adapter_delivery.py).
"""

from llm_operator.builders.adapter_source import AdapterSource
from llm_operator.builders.common import (
    Obj,
    container_security_context,
    image_pull_secrets,
    metadata,
    pod_security_context,
)
from llm_operator.builders.context import BuildContext
from llm_operator.builders.model_cache import (
    COMPONENT as MODEL_COMPONENT,
)
from llm_operator.builders.model_cache import (
    DOWNLOAD_BACKOFF_LIMIT,
    DOWNLOAD_RESOURCES,
    cache_env,
    cache_mounts,
    cache_volumes,
    ephemeral_storage,
    gpu_node_tolerations,
)

COMPONENT = "adapter"
ADAPTER_LABEL = "pagedock.dev/adapter"
SOURCE_MOUNT = "/adapter-source"
# NOTE: a Job's name is a label value of its pods, so at most 63 characters.
MAX_JOB_NAME_PREFIX = 63 - len("-adapter-") - 8
DOWNLOAD_SCRIPT = """\
import os, sys
from huggingface_hub import snapshot_download
repo, _, revision = sys.argv[1].removeprefix("hf://").partition("@")
path = snapshot_download(
    repo,
    revision=revision or None,
    cache_dir=os.path.join(os.environ["HF_HOME"], "hub"),
    allow_patterns=["adapter_config.json", "adapter_model.safetensors"],
)
if not os.path.isfile(os.path.join(path, "adapter_config.json")):
    sys.exit(f"{sys.argv[1]} has no adapter_config.json: not a PEFT adapter")
print(f"{sys.argv[1]} is in {path}")
"""
COPY_SCRIPT = """\
set -eu
test -f "$1/adapter_config.json" || { echo "$1 has no adapter_config.json" >&2; exit 1; }
mkdir -p "$(dirname "$2")"
rm -rf "$2.tmp"
cp -R "$1" "$2.tmp"
rm -rf "$2"
mv "$2.tmp" "$2"
echo "copied $1 to $2"
"""


def adapter_job_name(ctx: BuildContext, source: AdapterSource) -> str:
    return f"{ctx.name[:MAX_JOB_NAME_PREFIX]}-adapter-{source.key}"


def build_adapter_job(ctx: BuildContext, source: AdapterSource) -> Obj:
    """The download or copy Job of one adapter, in the engine image, placed like the engines."""
    spec = ctx.spec
    meta = metadata(ctx, adapter_job_name(ctx, source), COMPONENT)
    meta["labels"][ADAPTER_LABEL] = source.name
    container = {
        "name": source.delivery,
        "image": ctx.engine_image,
        "imagePullPolicy": spec.image_pull_policy,
        "command": _command(source),
        "env": cache_env(ctx, MODEL_COMPONENT) + list(spec.env),
        "resources": _resources(ctx),
        "securityContext": container_security_context(),
        "volumeMounts": cache_mounts(ctx, MODEL_COMPONENT) + _source_mounts(source),
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    pod: Obj = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": pod_security_context(),
        "containers": [container],
        "volumes": cache_volumes(ctx, MODEL_COMPONENT) + _source_volumes(source),
        "imagePullSecrets": image_pull_secrets(ctx),
        "nodeSelector": dict(spec.scheduling.node_selector),
        "tolerations": gpu_node_tolerations(ctx),
    }
    if spec.scheduling.affinity is not None:
        pod["affinity"] = spec.scheduling.affinity
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {
            "backoffLimit": DOWNLOAD_BACKOFF_LIMIT,
            "activeDeadlineSeconds": spec.startup_timeout_seconds,
            "template": {"metadata": {"labels": meta["labels"]}, "spec": pod},
        },
    }


def _command(source: AdapterSource) -> list[str]:
    if source.delivery == "download":
        return ["python", "-c", DOWNLOAD_SCRIPT, source.lora_path]
    origin = f"{SOURCE_MOUNT}/{source.sub_path}".rstrip("/")
    return ["sh", "-c", COPY_SCRIPT, "copy", origin, source.lora_path]


def _resources(ctx: BuildContext) -> Obj:
    storage = {"ephemeral-storage": ephemeral_storage(ctx, MODEL_COMPONENT)}
    return {key: {**value, **storage} for key, value in DOWNLOAD_RESOURCES.items()}


def _source_volumes(source: AdapterSource) -> list[Obj]:
    if source.delivery != "copy":
        return []
    claim = {"claimName": source.claim, "readOnly": True}
    return [{"name": "adapter-source", "persistentVolumeClaim": claim}]


def _source_mounts(source: AdapterSource) -> list[Obj]:
    if source.delivery != "copy":
        return []
    return [{"name": "adapter-source", "mountPath": SOURCE_MOUNT, "readOnly": True}]
