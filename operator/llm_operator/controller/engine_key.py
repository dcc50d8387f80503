"""The engines' API key (spec.apiKeySecret), which the operator sends to manage their adapters:
read from the Secret each pass (a rotated key is picked up), never stored or logged.

NOTE: the operator's ClusterRole grants no access to Secrets (tests/k8s_operator/test_manifests.py
holds that); a deployment with both adapters and an API key grants the operator `get` on its one
Secret by a Role of its own (docs/lora.md), else its adapters are Failed, naming this."""

import base64
import binascii

from llm_operator.builders import BuildContext
from llm_operator.k8s.kube import KubeClient, KubeError
from llm_operator.k8s.resources import SECRET


async def engine_api_key(kube: KubeClient, ctx: BuildContext) -> str | None:
    """The key, None when the deployment has none; ValueError naming the Secret, the key and the
    cause when it cannot be read."""
    ref = ctx.spec.api_key_secret
    if ref is None:
        return None
    where = f"Secret {ref.name} (key {ref.key}), the engines' API key,"
    try:
        secret = await kube.get(SECRET.object_path(ctx.namespace, ref.name))
    except KubeError as error:
        hint = (
            f"; the operator holds no Secret access of its own: grant its service account `get` "
            f"on secrets/{ref.name} in this namespace (docs/lora.md)"
            if error.status == 403
            else ""
        )
        raise ValueError(f"{where} cannot be read: {error.message}{hint}") from None
    if secret is None:
        raise ValueError(f"{where} does not exist")
    if (text := (secret.get("stringData") or {}).get(ref.key)) is not None:
        return str(text)
    encoded = (secret.get("data") or {}).get(ref.key)
    if encoded is None:
        raise ValueError(f"{where} has no such key")
    try:
        return base64.b64decode(encoded).decode()
    except (binascii.Error, UnicodeDecodeError):
        raise ValueError(f"{where} is not base64-encoded UTF-8 text") from None
