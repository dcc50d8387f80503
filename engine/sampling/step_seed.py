"""The seed of one sampling step of a request with its own seed: a function of (seed, position).

A seeded request draws its noise (Sampler._exponential_noise) from a generator seeded afresh
each step with step_seed(seed, number of output tokens so far), not from one generator that
advances step by step. Its draws are then the same whatever shares its batch, after a preemption,
and in a continuation (engine/inputs/continuation.py): a stream resumed on another replica after
8,000 tokens starts at position 8,000 at once, where a running generator would first have to
replay 8,000 vocabulary-wide draws on the engine thread (seconds, with every other stream
waiting).

The mix is SplitMix64's (Steele, Lea and Flood, 2014): the seed is mixed first, so the child
seeds of n > 1 (seed + index, engine/sampling/parallel_sampling.py) give unrelated streams rather
than each other's shifted by a step.
"""

from __future__ import annotations

_MASK = 2**64 - 1
_GOLDEN_GAMMA = 0x9E3779B97F4A7C15


def step_seed(seed: int, position: int) -> int:
    """The generator seed of the step that samples output token `position` (0-based) of a
    request seeded `seed` (any int in torch's seed range); in [0, 2**64)."""
    return _mix((_mix(seed & _MASK) + (position + 1) * _GOLDEN_GAMMA) & _MASK)


def _mix(z: int) -> int:
    """SplitMix64's finaliser: every input bit flips each output bit with probability ~1/2."""
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)
