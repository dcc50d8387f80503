"""pagedock's prefix-aware router: sends each request to the engine replica that already holds the
longest run of its KV blocks, unless that replica's queue makes another one faster.

Torch-free (its container image is slim): it imports only the torch-free engine modules
(block hashing, tokenizer, chat template, model registry, protocol, errors).
"""
