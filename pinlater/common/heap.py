"""Give the memory of large replies back to the system (glibc malloc; a no-op elsewhere).

A reply of many large bodies allocates its size several times over (the bodies, the encoded
reply, the frame). glibc serves a large allocation with its own mmap only while the size is
above a threshold that it raises to the size of the last such block freed, so after the first
large reply the next ones come from the heap arenas, and freed arena memory stays with the
process: 300 one-MiB jobs left a server at ~900 MB RSS for good. Two calls keep RSS bounded:

- `keep_large_blocks_mapped()` (at start) pins the mmap threshold, so every block of at least
  `MMAP_THRESHOLD` bytes is mapped on its own and unmapped when freed;
- `release_free_memory()` (after a large reply) returns the free pages of every arena
  (`malloc_trim(0)`): the smaller pieces a reply leaves behind.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
import threading

log = logging.getLogger(__name__)

#: blocks of at least this many bytes get their own mapping (glibc's default start value)
MMAP_THRESHOLD = 128 * 1024
#: a reply at least this large is followed by `release_free_memory()`
TRIM_AFTER_BYTES = 1024 * 1024
_M_MMAP_THRESHOLD = -3  # mallopt parameter (malloc.h)
_trim_lock = threading.Lock()


@functools.cache
def _libc() -> ctypes.CDLL | None:
    """glibc, or None where its malloc is not the allocator (musl, macOS)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
        libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    except (OSError, AttributeError):
        return None
    return libc


def keep_large_blocks_mapped() -> bool:
    """Pin glibc's mmap threshold at MMAP_THRESHOLD; False where that is not possible."""
    libc = _libc()
    if libc is None:
        return False
    ok = bool(libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD))
    if not ok:
        log.warning(
            "mallopt(M_MMAP_THRESHOLD) failed: freed reply memory may stay with the process"
        )
    return ok


def release_free_memory() -> None:
    """Return the arenas' free pages to the system. One trim at a time: a trim that another
    thread is running already does the work."""
    libc = _libc()
    if libc is None or not _trim_lock.acquire(blocking=False):
        return
    try:
        libc.malloc_trim(0)
    finally:
        _trim_lock.release()
