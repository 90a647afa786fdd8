"""Keep the memory a training step frees for the next step, on Linux with glibc.

A CPU training step allocates and frees the same tensors, a few MB each, every step. glibc's malloc gives the top of
its heap back to the kernel once more than its trim threshold (at most 64 MB by default) lies free there, and serves
blocks above its mmap threshold by fresh mappings; either way the next step touches new pages, and each page's first
touch is a page fault that the kernel answers by zeroing it. Raising both thresholds keeps those pages in the process,
as the jemalloc or tcmalloc preloads that CPU training guides recommend would, without a preload
(experiments/README.md, "Freed memory kept": the page faults and system time it saves).
"""

import ctypes
import platform

# glibc's malloc.h: the mallopt parameters
M_TRIM_THRESHOLD = -1
M_TOP_PAD = -2
M_MMAP_THRESHOLD = -3

MMAP_THRESHOLD = 32 << 20  # the most glibc accepts (its dynamic threshold's ceiling): smaller tensors reuse the heap
TRIM_THRESHOLD = 1 << 30  # free memory at the heap's top kept up to 1 GiB: a CPU step of the recipes frees far less
TOP_PAD = 64 << 20  # the heap grows 64 MB at a time, not a tensor at a time


def reuse_freed_memory() -> bool:
    """Set glibc's malloc to keep freed memory for reuse (see the module's docstring). Returns whether it did: False
    where the C library is not glibc (macOS, Windows, musl), which is left as it is."""
    if platform.libc_ver()[0] != "glibc":
        return False
    libc = ctypes.CDLL(None)
    settings = ((M_MMAP_THRESHOLD, MMAP_THRESHOLD), (M_TRIM_THRESHOLD, TRIM_THRESHOLD), (M_TOP_PAD, TOP_PAD))
    return all(libc.mallopt(parameter, value) == 1 for parameter, value in settings)
