"""When this process reached each stage of a cold start, in seconds since the process started.

    process_start         0: the kernel's start time of this process (/proc/self/stat), so the
                          interpreter's own start and every import count
    imports_done          the server's modules (torch, the engine, fastapi) are imported
    weights_located       the model's files are on this machine and its config is read
    kernels_ready         the C++ CPU kernels are loaded (or known to be off); none on GPUs
    weights_loaded        the weights are in the model (and packed for oneDNN on the CPU)
    warmup_done           the engine is built: KV cache allocated, CUDA graphs captured (the
                          GPU's warm-up; the CPU runs no warm-up step)
    ready                 the HTTP server listens: /health answers, the readiness probe passes
    first_request_served  the first request finished

The stages are listed in the order a server start passes them on the CPU (the kernels load
before the weights, since the attention backend is built first); a stage not reached (yet) is
absent. One recorder per process (`STARTUP_STAGES`): the code that reaches a stage marks it
there, and the first mark of each stage is kept. The server reports it as
`pagedock:startup_stage_seconds{stage}` and at GET /startup; the operator copies the newest
engine pod's figures into `status.startup`. Torch-free.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field

STAGES = (
    "process_start",
    "imports_done",
    "weights_located",
    "kernels_ready",
    "weights_loaded",
    "warmup_done",
    "ready",
    "first_request_served",
)
_STAT = "/proc/self/stat"


def process_age_s(stat_path: str = _STAT) -> float | None:
    """Seconds since the kernel started this process; None where /proc cannot tell (not Linux).

    NOTE: field 22 of /proc/<pid>/stat is the start time in clock ticks since boot, and
    CLOCK_BOOTTIME is the same clock now; the comm field (2) may hold spaces and parentheses, so
    the fields are counted from its closing parenthesis."""
    try:
        with open(stat_path) as f:
            text = f.read()
        fields = text[text.rindex(")") + 2 :].split()
        start_ticks = int(fields[19])  # field 22, counted from field 3
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return None
    return max(age, 0.0)


@dataclass
class StartupStages:
    """The stages one process reached; `mark` is thread-safe and keeps each stage's first time."""

    process_start_time: float = 0.0
    """Unix time the process started."""
    _process_start_mono: float = 0.0
    _reached: dict[str, float] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def of_this_process(cls) -> StartupStages:
        """Timed from the kernel's start time of this process, else from now."""
        age = process_age_s() or 0.0
        mono, wall = time.monotonic(), time.time()
        stages = cls(process_start_time=wall - age, _process_start_mono=mono - age)
        stages._reached["process_start"] = 0.0
        return stages

    def mark(self, stage: str) -> None:
        """Record that `stage` (one of STAGES) is reached now, unless it was before."""
        if stage not in STAGES:
            raise ValueError(f"unknown start-up stage {stage!r}; stages: {', '.join(STAGES)}")
        seconds = max(time.monotonic() - self._process_start_mono, 0.0)
        with self._lock:
            self._reached.setdefault(stage, round(seconds, 4))

    def seconds(self) -> dict[str, float]:
        """Each stage reached so far: seconds since the process started, in STAGES order."""
        with self._lock:
            return {stage: self._reached[stage] for stage in STAGES if stage in self._reached}

    def report(self) -> dict[str, object]:
        """GET /startup's body."""
        return {
            "process_start_time": round(self.process_start_time, 3),
            "stages": self.seconds(),
        }


STARTUP_STAGES = StartupStages.of_this_process()


def mark_stage(stage: str) -> None:
    """Mark `stage` reached in this process's recorder."""
    STARTUP_STAGES.mark(stage)
