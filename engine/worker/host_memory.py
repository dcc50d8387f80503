"""Keep freed host memory for the next step instead of handing it back to the kernel.

A CPU step allocates its activations afresh and frees them at its end. glibc hands blocks over
its mmap threshold, and the top of its heap past its trim threshold, back to the kernel on free,
so the next step faults every page in again and the kernel zeroes each one. A 2,048-token
prefill of SmolLM2-135M on 2 cores did so for ~44,000-67,000 pages a step (~110 ms of kernel
time) and took 1.18x as long as with the memory kept; steps of 512 prompt tokens and fewer
faulted nothing either way (benchmarks/results/host_memory_ab.json). Raising both thresholds
keeps the memory mapped: the process's resident memory stays at its largest step's working set,
which its peak held anyway. (vLLM's CPU guide asks for tcmalloc to be preloaded, for the same
reason.)

Only glibc's allocator is told; a preloaded tcmalloc or jemalloc ignores mallopt, and settings
the user made (GLIBC_TUNABLES, MALLOC_*_ environment variables) are left alone.
"""

from __future__ import annotations

import ctypes
import logging
import os
from functools import cache

logger = logging.getLogger("pagedock.host_memory")

# mallopt's parameter numbers (<malloc.h>).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
# glibc's largest mmap threshold on 64-bit (HEAP_MAX_SIZE / 2): blocks above it are mmapped
# whatever is asked. A step's largest activation (2,048 tokens x the MLP's 3,072 columns x 4
# bytes, 25 MB) fits under it.
MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024
# Heap tops smaller than this stay mapped (glibc takes an int).
TRIM_THRESHOLD_BYTES = 2**31 - 1

_USER_SETTINGS = (
    "GLIBC_TUNABLES",
    "MALLOC_TRIM_THRESHOLD_",
    "MALLOC_MMAP_THRESHOLD_",
    "MALLOC_TOP_PAD_",
)


@cache
def keep_freed_memory() -> bool:
    """Tell glibc's malloc to keep freed memory mapped (once per process). False where the
    allocator is not glibc's, or the user tuned it already."""
    if any(name in os.environ for name in _USER_SETTINGS):
        logger.info("host memory: malloc settings left as the environment sets them")
        return False
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
        libc.gnu_get_libc_version  # noqa: B018 (only glibc has it)
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    # The mmap threshold first: setting it also stops glibc moving the trim threshold itself.
    return bool(
        mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
        and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
    )
