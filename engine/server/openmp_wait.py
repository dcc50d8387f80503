"""How torch's OpenMP threads wait between parallel regions under `pagedock serve`.

torch's CPU wheels use GNU OpenMP, whose threads spin a little at the end of a parallel region
and then sleep in the kernel until the next one wakes them. A server's decode step is ~300 short
regions (each GEMM, the attention and norm kernels) with Python between them, and on a small
machine the HTTP, output and client threads share the cores: waking the sleeping threads over
and over costs a step a good part of its time. Intel's OpenMP, which vLLM's CPU guide preloads,
keeps its threads spinning for 200 ms (KMP_BLOCKTIME) instead. `pagedock serve` therefore sets
OMP_WAIT_POLICY=ACTIVE before torch loads, unless the environment already says how OpenMP
waits; an idle server still sleeps (measured: no CPU time while no request runs), and where
there are more threads than cores GNU OpenMP throttles the spinning itself.
Measured: benchmarks/results/omp_wait_ab_20684af.json (docs/server.md, "How torch's OpenMP
threads wait"): 1.27x the tokens/s at concurrency 1, 1.08-1.14x at 8, even at 32-64."""

from __future__ import annotations

from collections.abc import MutableMapping

# Any of these says how OpenMP threads wait: a user's setting is kept as it is.
WAIT_SETTINGS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")
SERVE_WAIT_POLICY = "ACTIVE"


def default_wait_policy(environ: MutableMapping[str, str]) -> bool:
    """Set OMP_WAIT_POLICY=ACTIVE in `environ` unless a wait setting is there already; whether
    it was set. Only effective before torch (and so OpenMP) is loaded."""
    if any(name in environ for name in WAIT_SETTINGS):
        return False
    environ["OMP_WAIT_POLICY"] = SERVE_WAIT_POLICY
    return True
