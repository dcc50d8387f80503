"""A tensor-parallel worker rank (1 .. tp-1): its own process, model shard and KV cache.

It builds what rank 0 builds, in the same order (the collectives of start-up must match), then
runs the forward pass of every step rank 0 sends it until told to stop. It has no scheduler,
tokenizer or sampler: rank 0 decides everything and samples from the gathered logits.

It never outlives the engine: a closed pipe (the engine exited), a parent that is gone (the
engine was killed; checked twice a second) or a failed collective (a peer died) ends it.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path

import torch

from engine.config import EngineConfig
from engine.distributed.tp_group import TPGroup
from engine.executor.step_codec import decode_step
from engine.loader.model_loader import read_model_config
from engine.worker.host_memory import keep_freed_memory
from engine.worker.model_runner import ModelRunner
from engine.worker.rank_builder import build_runner

logger = logging.getLogger("pagedock.tp_worker")
_PARENT_POLL_S = 0.5


@dataclass(frozen=True)
class RankSpec:
    """What a worker needs to build its shard; picklable (it crosses the spawn)."""

    config: EngineConfig
    model_path: Path
    max_model_len: int
    dtype: torch.dtype
    device_type: str
    rank: int
    port: int
    parent_pid: int


def rank_device(device_type: str, rank: int) -> torch.device:
    """Rank r runs on GPU r (the pod's visible GPUs), or on the CPU."""
    if device_type == "cuda":
        device = torch.device("cuda", rank)
        torch.cuda.set_device(device)
        return device
    return torch.device("cpu")


def threads_per_rank(config: EngineConfig) -> int:
    """On the CPU the ranks share the cores: each takes its share unless num_threads says."""
    cores = len(os.sched_getaffinity(0))
    return config.num_threads or max(1, cores // config.tensor_parallel_size)


def run_worker(spec: RankSpec, conn: Connection) -> None:
    """The spawned process's entry point. An exception ends it non-zero, with its traceback."""
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s rank {spec.rank} %(message)s")
    threading.Thread(target=_exit_with_parent, args=(spec.parent_pid,), daemon=True).start()
    runner = build_worker_runner(spec)
    conn.send_bytes(b"ready")
    _serve_steps(runner, conn)


def build_worker_runner(spec: RankSpec) -> ModelRunner:
    """What LLMEngine builds on rank 0, minus the scheduler and the text stack."""
    config = spec.config
    device = rank_device(spec.device_type, spec.rank)
    if device.type == "cpu":
        torch.set_num_threads(threads_per_rank(config))
        keep_freed_memory()
    tp = TPGroup(spec.rank, config.tensor_parallel_size, spec.port, device)
    model_config = read_model_config(spec.model_path)
    return build_runner(
        config, spec.model_path, model_config, spec.max_model_len, spec.dtype, device, tp
    )


def _serve_steps(runner: ModelRunner, conn: Connection) -> None:
    with torch.inference_mode():
        while True:
            try:
                payload = conn.recv_bytes()
            except (EOFError, OSError):
                return  # the engine is gone
            if not payload:
                return  # a clean stop
            runner.forward(decode_step(payload))


def _exit_with_parent(parent_pid: int) -> None:
    while os.getppid() == parent_pid:
        time.sleep(_PARENT_POLL_S)
    os._exit(1)
