"""Tensor parallelism: the process group, the worker ranks, and what rank 0 sends them."""
