"""Rank 0's side of tensor parallelism: starts the worker ranks, sends them each step, watches
them, stops them.

    engine process (rank 0)                       worker process (rank r), spawned
    -----------------------                       --------------------------------
    scheduler -> batch -- encode_step --pipe-->   decode_step -> same forward pass
    forward: all-reduces / logits gather  <=====> all-reduces / gather (torch.distributed)
    sampler (rank 0 alone)
    watchdog thread: a worker's exit marks the engine dead; `check()` raises it

Steps travel over one pipe per worker rather than a collective: a worker blocks on its pipe while
the engine idles, however long, with no collective timeout to outlive, and the pipe's end is how
a worker learns that the engine exited.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import signal
import socket
import threading
import weakref
from dataclasses import asdict, dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from pathlib import Path

import torch

from engine.config import EngineConfig
from engine.core.scheduler_output import ScheduledRequest
from engine.distributed.tp_group import COLLECTIVE_TIMEOUT_S, TPGroup
from engine.executor.step_codec import encode_step
from engine.executor.tp_worker import RankSpec, rank_device, run_worker
from pagedock.errors import ConfigError, TensorParallelError

logger = logging.getLogger("pagedock.tp")
# How long a stopping worker may take before it is terminated, then killed.
_STOP_GRACE_S = 10.0


@dataclass
class StepTraffic:
    """What rank 0 sent its workers: steps and their encoded bytes (all workers together)."""

    num_steps: int = 0
    step_bytes: int = 0


class TPExecutor:
    """Owns the worker processes; `group` is rank 0's place in the process group."""

    def __init__(
        self,
        config: EngineConfig,
        model_path: Path,
        max_model_len: int,
        dtype: torch.dtype,
        device: torch.device,
    ) -> None:
        self.world_size = config.tensor_parallel_size
        _check_devices(device, self.world_size)
        self.port = config.tensor_parallel_port or _free_port()
        self.traffic = StepTraffic()
        self._lost: str | None = None
        self._closing = False
        self.workers: list[BaseProcess] = []
        self.conns: list[Connection] = []
        self._finalizer = weakref.finalize(self, _stop, self.workers, self.conns)
        context = mp.get_context("spawn")
        for rank in range(1, self.world_size):
            spec = RankSpec(
                config, model_path, max_model_len, dtype, device.type, rank, self.port, os.getpid()
            )
            ours, theirs = context.Pipe()
            process = context.Process(
                target=run_worker, args=(spec, theirs), name=f"pagedock-tp-rank{rank}", daemon=True
            )
            process.start()
            theirs.close()
            self.workers.append(process)
            self.conns.append(ours)
        threading.Thread(target=self._watch, name="pagedock-tp-watchdog", daemon=True).start()
        try:
            self.group = TPGroup(0, self.world_size, self.port, rank_device(device.type, 0))
        except BaseException:
            self.close()
            raise

    def wait_ready(self) -> None:
        """Until every worker has built its shard (their start-up collectives are done by now)."""
        for rank, conn in enumerate(self.conns, start=1):
            if not conn.poll(COLLECTIVE_TIMEOUT_S):
                raise TensorParallelError(f"tensor-parallel rank {rank} did not start in time")
            try:
                conn.recv_bytes()
            except (EOFError, OSError) as e:
                raise self._error(f"rank {rank} failed to start") from e

    def send_step(self, batch: list[ScheduledRequest]) -> None:
        """Hand the step's batch to every worker (before rank 0 runs it)."""
        self.check()
        payload = encode_step(batch)
        try:
            for conn in self.conns:
                conn.send_bytes(payload)
        except OSError as e:
            raise self._error("a worker's pipe broke") from e
        self.traffic.num_steps += 1
        self.traffic.step_bytes += len(payload) * len(self.conns)

    def check(self) -> None:
        """TensorParallelError once a worker has exited (the watchdog saw it)."""
        if self._lost is not None:
            raise TensorParallelError(self._lost)

    def failure(self, cause: BaseException) -> TensorParallelError:
        """The error that kills the engine when a step failed mid-collective."""
        return self._error(f"a step failed ({type(cause).__name__}: {cause})")

    def stats(self) -> dict[str, int]:
        """Rank 0's collectives and what it sent its workers, since start."""
        counts = {**asdict(self.group.counts), **asdict(self.traffic)}
        return {"tensor_parallel_size": self.world_size, **counts}

    def close(self) -> None:
        """Stop the workers: a clean stop, then terminate, then kill."""
        self._closing = True
        self._finalizer()

    def _error(self, what: str) -> TensorParallelError:
        reason = self._lost or f"tensor-parallel group broken: {what}"
        return TensorParallelError(reason)

    def _watch(self) -> None:
        sentinels = {p.sentinel: (rank, p) for rank, p in enumerate(self.workers, start=1)}
        ready = wait(list(sentinels))
        if self._closing:
            return
        rank, process = sentinels[ready[0]]  # type: ignore[index]
        assert process.pid is not None
        self._lost = (
            f"tensor-parallel rank {rank} (pid {process.pid}) exited "
            f"({_exit_status(process.pid)}); the engine cannot run any more steps"
        )
        logger.error("%s", self._lost)


def _stop(workers: list[BaseProcess], conns: list[Connection]) -> None:
    for conn in conns:
        try:
            conn.send_bytes(b"")
            conn.close()
        except OSError:
            pass  # already gone
    for process in workers:
        process.join(_STOP_GRACE_S)
        if process.is_alive():
            logger.warning("tensor-parallel worker %s did not stop; terminating it", process.pid)
            process.terminate()
            process.join(_STOP_GRACE_S)
        if process.is_alive():
            process.kill()
            process.join()


def _exit_status(pid: int) -> str:
    """How a worker ended, read without reaping it.

    NOTE: WNOWAIT leaves the child to `_stop`'s join: two threads reaping the same child race, and
    the loser sees it as still running."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
    except ChildProcessError:
        return "status unknown"
    if info is None:
        return "status unknown"
    if info.si_code == os.CLD_EXITED:
        return f"code {info.si_status}"
    return f"killed by {signal.Signals(info.si_status).name}"


def _check_devices(device: torch.device, world_size: int) -> None:
    """One GPU per rank: ConfigError when fewer are visible."""
    if device.type == "cuda" and torch.cuda.device_count() < world_size:
        raise ConfigError(
            f"tensor_parallel_size {world_size} needs {world_size} GPUs (one per rank); "
            f"{torch.cuda.device_count()} visible"
        )


def _free_port() -> int:
    """A port free on this host now (the rendezvous binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
