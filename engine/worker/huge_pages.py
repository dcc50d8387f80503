"""Host memory for the CPU KV cache: zero pages from the kernel, and transparent huge pages.

The cache must start zeroed (a kernel that multiplies a zero weight by an unwritten value must not
read NaN), but writing gigabytes of zeros was the slowest stage of a cold start. An anonymous
mapping is zero by contract: the kernel hands each page out zeroed when it is first touched, so
the start writes nothing and a page is zeroed only when a block first uses it (`zeroed_tensor`).

Decode attention jumps from block to block of a cache that spans gigabytes; with 4 KiB pages
nearly every jump is also a TLB miss and a page walk. Linux backs an anonymous mapping with
2 MiB pages only where asked (`/sys/kernel/mm/transparent_hugepage/enabled` is `madvise` on
most distributions), so the cache asks, before its pages are first touched. Where the kernel
refuses or is not Linux, the cache keeps ordinary pages: only the speed differs.
"""

from __future__ import annotations

import ctypes
import logging
import math
import mmap
import sys

import torch

logger = logging.getLogger("pagedock.huge_pages")

HUGE_PAGE = 2 << 20
_MADV_HUGEPAGE = 14  # linux/mman.h

# EngineConfig.kv_cache_prefault: write the zeros at start instead (`pagedock serve` sets it).
_prefault = False


def set_kv_cache_prefault(enabled: bool) -> None:
    """Whether `zeroed_tensor` writes its zeros up front (every page resident from the start)."""
    global _prefault
    _prefault = enabled


def zeroed_tensor(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """A CPU tensor of zeros on an anonymous mapping of its own, huge pages advised, its pages
    untouched unless `set_kv_cache_prefault` (the mapping lives as long as the tensor)."""
    size = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
    if size == 0:
        return torch.zeros(shape, dtype=dtype)
    mapping = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    tensor = torch.frombuffer(mapping, dtype=dtype).view(shape)
    advise_huge_pages(tensor)
    if _prefault:
        tensor.zero_()
    return tensor


def advise_huge_pages(tensor: torch.Tensor) -> bool:
    """Asks Linux to back `tensor`'s memory with huge pages (call before the pages are touched);
    returns whether the advice was taken. Only the whole 2 MiB pages inside the tensor are
    advised, so no other allocation's memory is affected."""
    if sys.platform != "linux" or tensor.device.type != "cpu":
        return False
    start = tensor.data_ptr()
    end = start + tensor.numel() * tensor.element_size()
    first = -(-start // HUGE_PAGE) * HUGE_PAGE
    last = end // HUGE_PAGE * HUGE_PAGE
    if last <= first:
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    if libc.madvise(first, last - first, _MADV_HUGEPAGE) != 0:
        logger.debug("madvise(MADV_HUGEPAGE) refused: errno %d", ctypes.get_errno())
        return False
    return True
