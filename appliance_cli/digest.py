"""sha256 of a file on the controller: the one implementation (bundle verify, OCI layouts, the
base rootfs), reading into one reused buffer."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

READ_SIZE = 1 << 20


def sha256_file(
    path: Path, buf_size: int = READ_SIZE, on_chunk: Callable[[int], None] | None = None
) -> tuple[str, int]:
    """(hex digest, size in bytes); `on_chunk(n)` after each chunk read, for progress."""
    h = hashlib.sha256()
    buf = bytearray(buf_size)
    view = memoryview(buf)
    total = 0
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            h.update(view[:n])
            total += n
            if on_chunk is not None:
                on_chunk(n)
    return h.hexdigest(), total
