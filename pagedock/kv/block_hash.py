"""Chained block hashes: the one definition shared by the engine and the router (torch-free).

    h_0 = sha256(b"pagedock-kv-v1" + model identity + extra keys)
    h_i = sha256(h_{i-1} + token ids of block i as little-endian int32)

A request for a LoRA adapter chains from its adapter's root instead, sha256(h_0 + b"\x00lora:" +
adapter name) (`lora_root_hash`): its blocks are shared with requests for the same adapter only,
never with the base model or another adapter, and whoever knows h_0 can derive it.

A request with a `cache_salt` (vLLM's per-request field) chains from a salted root,
sha256(r + b"\x00salt:" + salt), where r is the root it would chain from unsalted (h_0 or its
adapter's) (`salted_root_hash`): its blocks are shared only with requests that carry the same
salt (and adapter). Like vLLM, the salt keys the first block only; every later block inherits it
through its parent. Unsalted requests share with each other, never with salted ones. A salt
isolates only while other tenants cannot guess it (the router derives a tenant's from its API key,
docs/router.md).

Only full blocks are hashed. A block's hash names its whole prefix, so two requests share a block
exactly when they share every token up to its end. sha256 keeps one tenant from crafting a prompt
whose hash collides with another's cached KV.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Sequence

BlockHash = bytes

_DOMAIN = b"pagedock-kv-v1"


def root_hash(model_identity: str, extra_keys: Iterable[str] = ()) -> BlockHash:
    """h_0: the seed of every chain; different models (or LoRA, cache salts) never share blocks."""
    digest = hashlib.sha256(_DOMAIN)
    digest.update(model_identity.encode())
    for key in extra_keys:
        digest.update(b"\x00" + key.encode())
    return digest.digest()


def lora_root_hash(root: BlockHash, lora_name: str) -> BlockHash:
    """The root of the chains of requests for the LoRA adapter `lora_name`, from the base
    model's root."""
    return hashlib.sha256(root + b"\x00lora:" + lora_name.encode()).digest()


def salted_root_hash(root: BlockHash, cache_salt: str) -> BlockHash:
    """The root of the chains of requests with `cache_salt`, from the root they would chain from
    unsalted (the model's, or their adapter's: `lora_root_hash`)."""
    salt = cache_salt.encode("utf-8", "surrogatepass")  # never raises: any str is some salt
    return hashlib.sha256(root + b"\x00salt:" + salt).digest()


def request_root(root: BlockHash, cache_salt: str | None) -> BlockHash:
    """Where a request's chain starts: `root` (the model's or its adapter's), salted by its
    `cache_salt` when it has one."""
    return root if cache_salt is None else salted_root_hash(root, cache_salt)


def hash_block(parent: BlockHash, token_ids: Sequence[int]) -> BlockHash:
    """h_i from h_{i-1} and the tokens of block i."""
    packed = struct.pack(f"<{len(token_ids)}i", *token_ids)
    return hashlib.sha256(parent + packed).digest()


def hash_blocks(
    token_ids: Sequence[int],
    block_size: int,
    root: BlockHash,
    parent: BlockHash | None = None,
    start_block: int = 0,
) -> list[BlockHash]:
    """Hashes of the full blocks of token_ids from block `start_block` on.

    `parent` is the hash of block start_block - 1 (or `root` when start_block is 0), so callers
    can extend a chain incrementally as tokens arrive.
    """
    hashes: list[BlockHash] = []
    prev = root if parent is None else parent
    num_full = len(token_ids) // block_size
    for i in range(start_block, num_full):
        prev = hash_block(prev, token_ids[i * block_size : (i + 1) * block_size])
        hashes.append(prev)
    return hashes
