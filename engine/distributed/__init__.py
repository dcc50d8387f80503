"""Tensor parallelism's process group: the collectives ranks share (gloo on the CPU, NCCL on
GPUs) and its timeouts."""
