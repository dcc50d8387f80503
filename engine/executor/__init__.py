"""Tensor parallelism across processes: the engine's side (TPExecutor) and each rank's worker
process, with the per-step message they exchange."""
