"""Attention backends: the interface, the torch/C++ backend (CPU) and the Triton backend (GPU)."""
