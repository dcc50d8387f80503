"""Autoscaling benchmark on the one-machine e2e cluster (root; the `make e2e` harness): bursty
multi-tenant load against SmolLM2-135M engines, the built-in autoscaler (0..3 replicas, scale to
zero when idle) against a fixed 3 replicas, one arm after the other in one run.

    sudo python benchmarks/autoscale.py [--bursts 3] [--burst-s 20] [--gap-s 45]

Load: `--bursts` bursts of `--burst-s` seconds, `--concurrency` clients each, separated by idle
gaps of `--gap-s`; each request is one of `--tenants` tenants' long shared prefix plus its own
question, streamed, 16 tokens. Per arm: requests served, errors, TTFT p50/p99 (first streamed
byte, as the client sees it: a request held while an engine starts counts its wait), replica-
seconds (engine pods alive, integrated over the run: the cost), and the cold-start wait (the
longest TTFT of the first burst). Writes benchmarks/results/autoscale_smollm2.{json,png,md}.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "operator")]

from benchmarks.machine import git_commit, machine_info  # noqa: E402
from tests.e2e.cluster import Cluster, running_cluster  # noqa: E402
from tests.e2e.kubelet import prepare_node_cache  # noqa: E402
from tests.e2e.netns import PodNetwork, can_make_namespaces  # noqa: E402
from tests.e2e.runtime import CHECKOUT, REPO, ProcessRuntime  # noqa: E402

NODE_CACHE = Path("/var/tmp/pagedock-e2e-cache")
RESULTS = ROOT / "benchmarks" / "results" / "autoscale_smollm2"
BUILTIN = {
    "enabled": True,
    "minReplicas": 0,
    "maxReplicas": 3,
    "targetConcurrency": 2,
    "stableWindowSeconds": 20,
    "scaleDownStabilizationSeconds": 30,
    "scaleToZeroAfterSeconds": 30,
}


def arm_edit(arm: str) -> Any:
    def edit(obj: dict) -> dict:
        spec = obj["spec"]
        if arm == "builtin":
            spec["replicas"] = 0
            spec["autoscaling"] = dict(BUILTIN)
        else:
            spec["replicas"] = 3
        spec["router"] = {"holdTimeoutSeconds": 600}
        return obj

    return edit


def tenant_prompt(tenant: int, n: int) -> str:
    words = " ".join(f"t{tenant}r{i}" for i in range(48))
    return f"Tenant {tenant} rules: {words}. Request {n}: answer briefly."


async def one_request(http: aiohttp.ClientSession, ip: str, prompt: str) -> dict[str, Any]:
    body = {"prompt": prompt, "max_tokens": 16, "stream": True, "temperature": 0}
    started = time.monotonic()
    ttft = None
    try:
        async with http.post(
            f"http://{ip}:8080/v1/completions", json=body, timeout=aiohttp.ClientTimeout(total=900)
        ) as response:
            ok = response.status == 200
            async for chunk in response.content.iter_any():
                if ttft is None and chunk.strip():
                    ttft = time.monotonic() - started
                ok = ok and b'"error"' not in chunk
    except aiohttp.ClientError:
        ok = False
    return {"start": started, "ok": ok, "ttft_s": ttft}


async def bursts(ip: str, args: argparse.Namespace, t0: float) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    counter = iter(range(10**9))
    async with aiohttp.ClientSession() as http:
        for burst in range(args.bursts):
            deadline = time.monotonic() + args.burst_s

            async def client(c: int, burst: int = burst, deadline: float = deadline) -> None:
                while time.monotonic() < deadline:
                    n = next(counter)
                    result = await one_request(http, ip, tenant_prompt((c + n) % args.tenants, n))
                    results.append({**result, "burst": burst, "start": result["start"] - t0})

            await asyncio.gather(*(client(c) for c in range(args.concurrency)))
            if burst < args.bursts - 1:
                await asyncio.sleep(args.gap_s)
    return results


async def sample(cluster: Cluster, ip: str, t0: float, timeline: list[dict[str, Any]]) -> None:
    async with aiohttp.ClientSession() as http:
        while True:
            held = 0
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                async with http.get(
                    f"http://{ip}:8080/router/demand", timeout=aiohttp.ClientTimeout(total=2)
                ) as r:
                    view = await r.json()
                    held = view["num_held"] + view["num_inflight"]
            engines = cluster.kubelet.pods("smollm2-engine-")
            timeline.append(
                {
                    "t": round(time.monotonic() - t0, 2),
                    "engines": len(engines),
                    "ready": sum(p.ready for p in engines),
                    "queue": held,
                }
            )
            await asyncio.sleep(1.0)


async def run_arm(arm: str, args: argparse.Namespace) -> dict[str, Any]:
    network = PodNetwork()
    network.open()
    workdir = Path(f"/var/tmp/pagedock-e2e-{network.run_id}")
    workdir.mkdir(parents=True)
    runtime = ProcessRuntime(workdir / "etc")
    try:
        async with running_cluster(network, runtime, workdir, NODE_CACHE, 0.2) as cluster:
            await cluster.apply_example(arm_edit(arm))
            await _wait_serving(cluster, arm)
            [router] = cluster.kubelet.pods("smollm2-router-")
            t0 = time.monotonic()
            timeline: list[dict[str, Any]] = []
            sampler = asyncio.create_task(sample(cluster, router.ip, t0, timeline))
            results = await bursts(router.ip, args, t0)
            await asyncio.sleep(args.tail_s)
            sampler.cancel()
            return summarize(arm, results, timeline)
    finally:
        network.close()
        shutil.rmtree(workdir, ignore_errors=True)


async def _wait_serving(cluster: Cluster, arm: str) -> None:
    """builtin: at zero (Ready, ScaledToZero); fixed: three engines ready."""
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        ready = cluster.condition("default", "smollm2", "Ready")
        status = cluster.llmd("default", "smollm2").get("status", {})
        if ready.get("status") == "True" and (arm == "builtin" or status.get("readyReplicas") == 3):
            return
        await asyncio.sleep(1)
    raise TimeoutError(f"{arm}: not serving after 600 s")


def summarize(
    arm: str, results: list[dict[str, Any]], timeline: list[dict[str, Any]]
) -> dict[str, Any]:
    ttfts = sorted(r["ttft_s"] for r in results if r["ok"] and r["ttft_s"] is not None)
    first = [r["ttft_s"] for r in results if r["burst"] == 0 and r["ttft_s"] is not None]
    replica_seconds = sum(s["engines"] for s in timeline)  # one sample per second
    return {
        "arm": arm,
        "requests": len(results),
        "served": sum(r["ok"] for r in results),
        "errors": sum(not r["ok"] for r in results),
        "ttft_p50_s": round(statistics.median(ttfts), 3) if ttfts else None,
        "ttft_p99_s": round(ttfts[min(len(ttfts) - 1, int(0.99 * len(ttfts)))], 3)
        if ttfts
        else None,
        "replica_seconds": replica_seconds,
        "cold_start_wait_s": round(max(first), 2) if first else None,
        "duration_s": timeline[-1]["t"] if timeline else 0,
        "timeline": timeline,
    }


def write(arms: list[dict[str, Any]], args: argparse.Namespace) -> None:
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "benchmark": "autoscale",
        "machine": machine_info(),
        "commit": git_commit(ROOT),
        "note": "2 shared CPU cores, other engineers' jobs running: absolute times are "
        "loaded-machine times; compare the arms",
        "settings": {
            **vars(args),
            "builtin_autoscaling": BUILTIN,
            "model": "smollm2-135m-instruct",
            "max_tokens": 16,
        },
        "arms": arms,
    }
    RESULTS.with_suffix(".json").write_text(json.dumps(record, indent=1) + "\n")
    lines = [
        "| arm | requests | served | errors | TTFT p50 (s) | TTFT p99 (s) | replica-seconds "
        "| cold-start wait (s) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for a in arms:
        lines.append(
            f"| {a['arm']} | {a['requests']} | {a['served']} | {a['errors']} | {a['ttft_p50_s']} "
            f"| {a['ttft_p99_s']} | {a['replica_seconds']} | {a['cold_start_wait_s']} |"
        )
    RESULTS.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    chart(arms)


def chart(arms: list[dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(arms), 1, figsize=(9, 3.2 * len(arms)), sharex=True)
    for ax, arm in zip(axes, arms, strict=True):
        t = [s["t"] for s in arm["timeline"]]
        ax.step(t, [s["engines"] for s in arm["timeline"]], where="post", label="engine pods")
        ax.step(t, [s["ready"] for s in arm["timeline"]], where="post", label="ready")
        ax2 = ax.twinx()
        ax2.plot(
            t,
            [s["queue"] for s in arm["timeline"]],
            color="grey",
            alpha=0.6,
            label="held + in flight",
        )
        ax.set_title(arm["arm"])
        ax.set_ylabel("replicas")
        ax2.set_ylabel("requests")
        ax.legend(loc="upper left")
        ax2.legend(loc="upper right")
    axes[-1].set_xlabel("seconds")
    fig.tight_layout()
    fig.savefig(RESULTS.with_suffix(".png"), dpi=100)


async def main(args: argparse.Namespace) -> None:
    arms = [await run_arm(arm, args) for arm in ("builtin", "fixed-3")]
    write(arms, args)


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bursts", type=int, default=3)
    parser.add_argument("--burst-s", type=float, default=20.0)
    parser.add_argument("--gap-s", type=float, default=45.0)
    parser.add_argument("--tail-s", type=float, default=40.0)
    parser.add_argument("--concurrency", type=int, default=6)
    parser.add_argument("--tenants", type=int, default=4)
    args = parser.parse_args()
    reason = can_make_namespaces()
    if reason:
        sys.exit(f"autoscale benchmark: {reason}")
    from pagedock.models.registry import DEFAULT_MODEL, resolve_model

    prepare_node_cache(NODE_CACHE, resolve_model(DEFAULT_MODEL).path)
    CHECKOUT.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "--bind", str(REPO), str(CHECKOUT)], check=True)
    try:
        asyncio.run(main(args))
    finally:
        subprocess.run(["umount", "--lazy", str(CHECKOUT)], check=False)


if __name__ == "__main__":
    cli()
