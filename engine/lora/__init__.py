"""LoRA adapters served beside the base model (docs/lora.md).

adapter_config.py reads an adapter's adapter_config.json, adapter.py its weights (plain tensors,
checked against the base model); adapter_registry.py holds the served adapters, their paths and
ids (torch-free: they come and go while the engine runs); slots.py is the scheduler's side (which
adapter holds which of the max_loras weight slots; torch-free), lora_manager.py the worker's (the
slots' weights and the step's mapping), lora_mapping.py each step's adapter per token row, and
lora_linear.py the projection wrapper that adds the batched low-rank deltas. This package's
`__init__` stays torch-free: the scheduler imports slots.py.
"""
