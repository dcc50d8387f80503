"""Issue 36 on the emulated cluster: an LLMDeployment of two engine replicas with two LoRA adapters
(PEFT adapters of the built-in model, made by peft, as file:// directories the pods can read);
each adapter answers through the router; a third one added to the spec reaches every replica
without a restart and status shows it Ready; one removed is unloaded everywhere."""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.e2e.cluster import LLMD, Cluster, eventually, get_json

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio, pytest.mark.timeout(1200)]

# Ranks and targets as fine-tunes use them (the engine test's adapters of the same model).
ADAPTERS: dict[str, dict[str, Any]] = {
    "support": dict(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"]),
    "sql": dict(r=16, lora_alpha=32, target_modules=["q_proj", "o_proj", "down_proj"]),
    "poems": dict(r=4, lora_alpha=8, target_modules=["gate_proj", "up_proj", "down_proj"]),
}
LORA_STD = 0.02


def make_adapters(base: Any, folder: Path) -> dict[str, str]:
    """Random PEFT adapters of the built-in model, saved by peft; name -> file:// source."""
    import torch
    from peft import LoraConfig, get_peft_model

    sources = {}
    for seed, (name, spec) in enumerate(ADAPTERS.items()):
        config = LoraConfig(lora_dropout=0.0, bias="none", task_type="CAUSAL_LM", **spec)
        model = get_peft_model(copy.deepcopy(base), config)
        generator = torch.Generator().manual_seed(200 + seed)
        with torch.no_grad():
            for param_name, param in model.named_parameters():
                if "lora_" in param_name:
                    param.copy_(torch.randn(param.shape, generator=generator) * LORA_STD)
        model.save_pretrained(str(folder / name))
        sources[name] = f"file://{folder / name}"
    for path in [folder, *folder.rglob("*")]:  # the pods run as user 10001
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    return sources


def declared(sources: dict[str, str], *names: str) -> list[dict[str, str]]:
    return [{"name": name, "source": sources[name]} for name in names]


async def served_adapters(ip: str) -> set[str]:
    models = await get_json(ip, 8000, "/v1/models")
    return {m["id"] for m in models["data"] if m.get("parent")}


async def every_engine_serves(cluster: Cluster, names: set[str]) -> bool:
    engines = cluster.kubelet.pods("smollm2-engine-")
    return bool(engines) and all([await served_adapters(e.ip) == names for e in engines])


def status(cluster: Cluster) -> dict[str, Any]:
    return dict(cluster.llmd("default", "smollm2").get("status", {}))


def engine_pods(cluster: Cluster) -> dict[str, int]:
    """Engine pod uid -> its container's restart count."""
    return {
        p["metadata"]["uid"]: p["status"]["containerStatuses"][0]["restartCount"]
        for p in cluster.pod_objects("default", "smollm2-engine-")
    }


async def complete(ip: str, model: str) -> dict[str, Any]:
    body = {"model": model, "prompt": "SELECT name FROM", "max_tokens": 8, "temperature": 0.0}
    timeout = aiohttp.ClientTimeout(total=120)
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"http://{ip}:8080/v1/completions", json=body, timeout=timeout) as response,
    ):
        assert response.status == 200, f"{model}: {await response.text()}"
        return dict(await response.json())


async def set_adapters(cluster: Cluster, adapters: list[dict[str, str]]) -> None:
    body = {"spec": {"model": {"adapters": adapters}}}
    assert await cluster.client.patch(LLMD, "default", "smollm2", body) < 400


async def until_adapters(cluster: Cluster, ready: str, names: set[str]) -> None:
    await eventually(
        lambda: status(cluster).get("adaptersReady") == ready,
        240,
        lambda: f"adaptersReady {ready}, saw {status(cluster).get('adapters')}",
    )
    await eventually(
        lambda: every_engine_serves(cluster, names), 60, f"every engine lists exactly {names}"
    )


async def test_a_third_adapter_reaches_every_replica_without_a_restart(
    cluster: Cluster, smollm2_hf_model: Any
) -> None:
    folder = cluster.kubelet.workdir / "adapters"  # under /var/tmp: the pods mount over /tmp
    folder.mkdir(mode=0o755)
    sources = make_adapters(smollm2_hf_model, folder)

    def two_adapters_two_replicas(obj: dict[str, Any]) -> dict[str, Any]:
        obj["spec"]["replicas"] = 2
        obj["spec"]["model"]["adapters"] = declared(sources, "support", "sql")
        return obj

    await cluster.apply_example(two_adapters_two_replicas)
    await cluster.wait_ready("default", "smollm2", timeout=900)
    await until_adapters(cluster, "2/2", {"support", "sql"})
    [router] = cluster.kubelet.pods("smollm2-router-")
    for model in ("smollm2-135m-instruct", "support", "sql"):
        assert (await complete(router.ip, model))["choices"][0]["text"] is not None
    pods = engine_pods(cluster)
    assert len(pods) == 2
    generation = cluster.api.live("apps/v1/deployments", "default", "smollm2-engine")["metadata"][
        "generation"
    ]

    await set_adapters(cluster, declared(sources, "support", "sql", "poems"))
    await until_adapters(cluster, "3/3", {"support", "sql", "poems"})
    [poems] = [a for a in status(cluster)["adapters"] if a["name"] == "poems"]
    assert (poems["state"], poems["readyReplicas"]) == ("Ready", 2)
    assert engine_pods(cluster) == pods  # the same pods, none restarted
    engine = cluster.api.live("apps/v1/deployments", "default", "smollm2-engine")
    assert engine["metadata"]["generation"] == generation  # the template never changed
    assert (await complete(router.ip, "poems"))["model"] == "poems"

    await set_adapters(cluster, declared(sources, "sql", "poems"))
    await until_adapters(cluster, "2/2", {"sql", "poems"})
    assert [a["name"] for a in status(cluster)["adapters"]] == ["sql", "poems"]
    assert engine_pods(cluster) == pods
