"""Online vs offline throughput on workload A: `pagedock serve` under the load generator at a fixed
concurrency, against the offline engine (`LLM.generate`) on the same requests.

    python benchmarks/online_throughput.py [--model smollm2-135m-instruct] [--concurrency 16]

Runs the offline figure first (benchmarks/offline_throughput.py's run_pagedock, all 64 requests
submitted at once), then starts a server on a free loopback port, warms it up, and streams the same
requests through HTTP. Prints both output-token rates and their ratio; --also-concurrency adds
runs at other concurrencies (e.g. 64, the offline batch) to separate the server's overhead from
the smaller batch that a lower concurrency gives.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.load_generator import run_load
from benchmarks.workloads import Workload, workload_a

_REPO_ROOT = Path(__file__).resolve().parents[1]


def offline_tok_s(model: str, workload: Workload, dtype: str) -> float:
    from benchmarks.offline_throughput import run_pagedock

    result: dict[str, Any] = run_pagedock(model, workload, dtype)
    return float(result["generated_tok_s"])


def start_server(model: str, dtype: str, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    command = [
        sys.executable,
        "-m",
        "pagedock",
        "serve",
        "--model",
        model,
        "--dtype",
        dtype,
        "--port",
        str(port),
        "--log-level",
        "warning",
    ]
    process = subprocess.Popen(
        command, cwd=_REPO_ROOT, stdout=log.open("wb"), stderr=subprocess.STDOUT
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited:\n{log.read_text()}")
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return process, url
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    process.kill()
    raise TimeoutError("the server did not become ready")


def online(
    url: str,
    workload: Workload,
    concurrency: int,
    system: str = "pagedock",
    model: str | None = None,
) -> dict[str, Any]:
    # Warm-up prompts of their own, so the measured requests find nothing in the prefix cache.
    warmup = Workload("warm-up", [p[::-1] for p in workload.prompts[:2]], max_tokens=4)
    asyncio.run(run_load(url, warmup, concurrency=2, model=model))
    report = asyncio.run(run_load(url, workload, concurrency=concurrency, model=model))
    print(f"{system} online, concurrency {concurrency}: {report.summary()}", flush=True)
    return {"system": system, "concurrency": concurrency, **report.__dict__}


def print_online_table(runs: list[dict[str, Any]]) -> None:
    print(
        "\n| system | concurrency | output tok/s | TTFT p50 / p99 ms | ITL p50 / p99 ms | "
        "errors | start-up s |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in runs:
        print(
            f"| {r['system']} | {r['concurrency']} | {r['output_tok_s']:.1f} | "
            f"{r['ttft_p50_ms']:.0f} / {r['ttft_p99_ms']:.0f} | {r['itl_p50_ms']:.0f} / "
            f"{r['itl_p99_ms']:.0f} | {r['num_errors']} | {r.get('startup_s', float('nan')):.1f} |"
        )


def save_online_chart(runs: list[dict[str, Any]], path: Path) -> None:
    """Output tok/s, and TTFT / inter-token latency p50 and p99, per system and concurrency."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{r['system']}\nc={r['concurrency']}" for r in runs]
    panels = [
        ("output tok/s (higher is better)", ["output_tok_s"]),
        ("TTFT ms p50 / p99 (lower is better)", ["ttft_p50_ms", "ttft_p99_ms"]),
        ("inter-token ms p50 / p99 (lower is better)", ["itl_p50_ms", "itl_p99_ms"]),
    ]
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.2 + 0.3 * len(runs)))
    for ax, (title, keys) in zip(axes, panels, strict=True):
        height = 0.8 / len(keys)
        for k, key in enumerate(keys):
            rows = [i + k * height for i in range(len(runs))]
            ax.barh(rows, [r[key] for r in runs], height=height, label=key.split("_")[1])
        ax.set_yticks([i + (len(keys) - 1) * height / 2 for i in range(len(runs))], labels)
        ax.invert_yaxis()
        ax.set_title(title, fontsize=9)
        if len(keys) > 1:
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def serve_and_load(
    model: str, args: argparse.Namespace, vocab: int, tmp: Path
) -> list[dict[str, Any]]:
    """Start `pagedock serve`, run the load generator at each concurrency, stop the server."""
    started = time.perf_counter()
    process, url = start_server(model, args.dtype, tmp / "server.log")
    startup_s = time.perf_counter() - started
    print(f"pagedock serve healthy after {startup_s:.1f}s", flush=True)
    try:
        # Each run gets token ids of its own (a repeat would hit the prefix cache of the last)
        # but the offline run's prompt lengths: the same work, token for token.
        concurrencies = [args.concurrency, *args.also_concurrency]
        runs = [
            online(url, workload_a(vocab, args.num_requests, content_seed=1 + i), c)
            for i, c in enumerate(concurrencies)
        ]
    finally:
        process.terminate()
        process.wait(timeout=60)
    runs[0] |= {"startup_s": startup_s}
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--num-requests", type=int, default=64)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--also-concurrency", type=int, nargs="*", default=[])
    parser.add_argument("--skip-offline", action="store_true")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    from benchmarks.offline_throughput import resolve_benchmark_model
    from engine.loader.model_loader import read_model_config
    from pagedock.models.registry import resolve_model

    with tempfile.TemporaryDirectory() as tmp:
        model = resolve_benchmark_model(args.model, Path(tmp))
        vocab = read_model_config(resolve_model(model).path).vocab_size
        workload = workload_a(vocab, args.num_requests)
        print(
            f"workload A: {len(workload.prompts)} requests, {workload.max_tokens} tokens each; "
            f"model {args.model}, {args.dtype}, {os.cpu_count()} cores",
            flush=True,
        )
        offline = None if args.skip_offline else offline_tok_s(model, workload, args.dtype)
        if offline is not None:
            print(f"offline: {offline:.1f} output tok/s", flush=True)
        runs = serve_and_load(model, args, vocab, Path(tmp))
    print_online_table(runs)
    for run in runs:
        if offline and run["system"] == "pagedock":
            ratio = run["output_tok_s"] / offline
            print(f"online/offline at concurrency {run['concurrency']}: {ratio:.2f}")
    if args.json:
        args.json.write_text(json.dumps({"offline_tok_s": offline, "online": runs}, indent=2))
        save_online_chart(runs, args.json.with_suffix(".png"))


if __name__ == "__main__":
    main()
