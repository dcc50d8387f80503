"""Operator benchmark against kmock's Kubernetes emulator (served from a separate process).

1. Reconcile latency of one LLMDeployment (every child: 12 objects), measured on the Reconciler
   directly: a cold pass (creates everything) and a warm pass (nothing changed: zero writes).
2. The whole operator (kopf, in this process) over 100 create/update/delete cycles: latency from
   `POST` to every child present, and this process's RSS along the way (should stay flat).

    python benchmarks/operator_reconcile.py [--cycles 100] [--passes 20]
"""

import argparse
import asyncio
import gc
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "operator")]

NAMESPACE = "bench"
COLLECTION = f"/apis/pagedock.dev/v1alpha1/namespaces/{NAMESPACE}/llmdeployments"
SPEC = {
    "model": {"source": "hf://org/model"},
    "resources": {"gpus": 1},
    "ingress": {"enabled": True, "host": "llm.example.com", "tlsSecretName": "tls"},
    "autoscaling": {"enabled": True, "mode": "hpa"},  # an HPA child (builtin makes none)
}


async def serve_emulator() -> None:
    import kmock

    from tests.k8s_operator.emulator import RESOURCES, Emulator

    class ForgetfulEmulator(Emulator):
        """Forgets served requests: kmock keeps them for assertions, and every later request
        gets slower with their number, which would measure the emulator, not the operator."""

        async def _handle(self, request: Any) -> Any:
            try:
                return await super()._handle(request)
            finally:
                self._requests.clear()
                for reaction in self._walk(kmock.Reaction):
                    reaction._requests.clear()

    async with ForgetfulEmulator() as emulator, kmock.Server(emulator) as server:
        for resource, info in RESOURCES.items():
            emulator.resources[resource] = info
        print(str(server.url).rstrip("/"), flush=True)
        await asyncio.get_running_loop().run_in_executor(
            None, sys.stdin.read
        )  # until the parent exits


def start_emulator() -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [sys.executable, __file__, "--serve-emulator"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert process.stdout is not None
    return process, process.stdout.readline().strip()


def write_kubeconfig(server: str) -> None:
    path = Path(tempfile.mkdtemp()) / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: b\n"
        f"clusters: [{{name: b, cluster: {{server: '{server}'}}}}]\n"
        "users: [{name: b, user: {token: t}}]\n"
        "contexts: [{name: b, context: {cluster: b, user: b}}]\n"
    )
    os.environ["KUBECONFIG"] = str(path)


def llmd(name: str) -> dict[str, Any]:
    meta = {"name": name, "namespace": NAMESPACE}
    return {
        "apiVersion": "pagedock.dev/v1alpha1",
        "kind": "LLMDeployment",
        "metadata": meta,
        "spec": SPEC,
    }


async def request(session: aiohttp.ClientSession, method: str, path: str, body: Any = None) -> Any:
    headers = {"Content-Type": "application/merge-patch+json"} if method == "PATCH" else {}
    async with session.request(method, path, json=body, headers=headers) as response:
        return await response.json(content_type=None) if response.status < 400 else None


async def measure_reconcile(server: str, passes: int) -> dict[str, float]:
    import kopf
    from llm_operator.controller.reconcile import Reconciler
    from llm_operator.k8s.kube import KubeClient
    from llm_operator.settings import OperatorSettings

    kube = KubeClient(lambda: kopf.login_with_kubeconfig(settings=kopf.OperatorSettings()))
    reconciler = Reconciler(kube, OperatorSettings(scrape_metrics=False))
    cold, warm, warm_writes = [], [], 0
    path = f"{COLLECTION}/direct"
    async with aiohttp.ClientSession(base_url=server) as session:
        for _ in range(passes):
            # NOTE: one name, deleted after each pass: kmock scans every object it ever stored
            # per request, so piling up objects would measure the emulator, not the operator.
            body = await request(session, "POST", COLLECTION, llmd("direct"))
            started = time.perf_counter()
            await reconciler.reconcile(body)
            cold.append(time.perf_counter() - started)
            body = await request(session, "GET", path)
            writes_before = kube.num_writes
            started = time.perf_counter()
            await reconciler.reconcile(body)
            warm.append(time.perf_counter() - started)
            warm_writes += kube.num_writes - writes_before
            await collect_garbage(session, "direct")
            await request(session, "DELETE", path)
    await kube.close()
    return {
        "cold_median_s": statistics.median(cold),
        "cold_max_s": max(cold),
        "warm_median_s": statistics.median(warm),
        "warm_writes": warm_writes,
    }


async def wait_for(
    session: aiohttp.ClientSession, path: str, present: bool, timeout: float = 20
) -> None:
    deadline = time.monotonic() + timeout
    # NOTE: generous: this also runs on shared CI machines under heavy load.
    while (await request(session, "GET", path) is not None) != present:
        if time.monotonic() > deadline:
            raise TimeoutError(path)
        await asyncio.sleep(0.01)


async def wait_for_replicas(session: aiohttp.ClientSession, path: str, replicas: int) -> None:
    deadline = time.monotonic() + 60
    while ((await request(session, "GET", path)) or {}).get("spec", {}).get("replicas") != replicas:
        if time.monotonic() > deadline:
            raise TimeoutError(path)
        await asyncio.sleep(0.01)


async def collect_garbage(session: aiohttp.ClientSession, name: str) -> None:
    """What Kubernetes' garbage collector does once the owner is gone (kmock has none): the
    operator puts no finalizer on an LLMDeployment, so its children go through their owner
    references."""
    from llm_operator.api.spec import LLMDeploymentSpec
    from llm_operator.builders import BuildContext, build_children
    from llm_operator.k8s.resources import kind_of
    from llm_operator.settings import OperatorSettings

    ctx = BuildContext(name, NAMESPACE, LLMDeploymentSpec.model_validate(SPEC), OperatorSettings())
    for child in build_children(ctx):
        await request(
            session, "DELETE", kind_of(child).object_path(NAMESPACE, child["metadata"]["name"])
        )


async def run_cycles(server: str, cycles: int) -> tuple[list[float], list[tuple[int, float]]]:
    engine = f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/cycle-engine"
    hpa = f"/apis/autoscaling/v2/namespaces/{NAMESPACE}/horizontalpodautoscalers/cycle"
    latencies, memory = [], []
    process = psutil.Process()
    async with aiohttp.ClientSession(base_url=server) as session:
        for cycle in range(1, cycles + 1):
            started = time.perf_counter()
            await request(session, "POST", COLLECTION, llmd("cycle"))
            await wait_for(session, hpa, present=True)
            latencies.append(time.perf_counter() - started)
            await request(session, "PATCH", f"{COLLECTION}/cycle", {"spec": {"replicas": 2}})
            while ((await request(session, "GET", engine)) or {}).get("spec", {}).get(
                "replicas"
            ) != 2:
                await asyncio.sleep(0.01)
            await request(session, "DELETE", f"{COLLECTION}/cycle")
            await wait_for(session, f"{COLLECTION}/cycle", present=False)
            await collect_garbage(session, "cycle")
            if os.environ.get("BENCH_DEBUG"):
                print(
                    f"cycle {cycle}: {latencies[-1] * 1000:.0f} ms", file=sys.__stderr__, flush=True
                )
            if cycle in {1, 10, 25, 50, 75, cycles}:
                gc.collect()
                memory.append((cycle, process.memory_info().rss / 2**20))
    return latencies, memory


def run_operator_cycles(server: str, cycles: int) -> tuple[list[float], list[tuple[int, float]]]:
    import kopf
    from kopf.testing import KopfRunner
    from llm_operator.controller.handlers import make_registry
    from llm_operator.settings import OperatorSettings

    settings = OperatorSettings(scrape_metrics=False, peering_name="", liveness_port=0)
    # Events off: each one is a new object in kmock, which slows every later request down.
    kopf_settings = kopf.OperatorSettings()
    kopf_settings.posting.enabled = False
    registry = make_registry(settings)
    with KopfRunner(
        ["run", "-A", "--standalone"], registry=registry, settings=kopf_settings, timeout=30
    ):
        time.sleep(2.0)  # watch streams up
        return asyncio.run(run_cycles(server, cycles))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=100)
    parser.add_argument("--passes", type=int, default=20)
    parser.add_argument("--serve-emulator", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_emulator:
        asyncio.run(serve_emulator())
        return
    emulator, server = start_emulator()
    try:
        write_kubeconfig(server)
        direct = asyncio.run(measure_reconcile(server, args.passes))
        latencies, memory = run_operator_cycles(server, args.cycles)
    finally:
        emulator.terminate()
    print(
        f"reconcile, cold (12 children created): median {direct['cold_median_s'] * 1000:.1f} ms, "
        f"max {direct['cold_max_s'] * 1000:.1f} ms over {args.passes} LLMDeployments"
    )
    print(
        f"reconcile, warm (unchanged): median {direct['warm_median_s'] * 1000:.1f} ms, "
        f"writes {direct['warm_writes']}"
    )
    print(
        "operator end to end, POST -> all children: "
        f"median {statistics.median(latencies) * 1000:.0f} ms, "
        f"max {max(latencies) * 1000:.0f} ms over {len(latencies)} cycles"
    )
    print(
        "operator process RSS (MiB) after cycle: " + ", ".join(f"{c}: {m:.1f}" for c, m in memory)
    )


if __name__ == "__main__":
    main()
