"""Sampling: the parameters a request carries (torch-free), their batched tensors, the sampler,
and parallel sampling (n > 1)."""
