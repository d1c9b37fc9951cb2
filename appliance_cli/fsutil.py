"""Replacing a file whole: the one implementation (kubeconfigs, bundle files, site files).

A fresh temporary file beside the target (mkstemp: O_EXCL, so never a file or link someone else
placed there), its mode set before any byte is written, fsync, rename over the target, fsync of
the directory: a reader sees the old file or the new one, never half, and a crash keeps one.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def atomic_write(
    path: Path, data: bytes | str, mode: int = 0o644, owner: tuple[int, int] | None = None
) -> None:
    """Replace `path` (the name itself: a symlink there is replaced, not followed) with `data`,
    mode `mode` exactly (no umask), owned by `owner` (uid, gid) where allowed. OSError propagates;
    the temporary file is gone either way."""
    raw = data.encode() if isinstance(data, str) else data
    directory = path.parent
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), mode)  # mkstemp made it 0600; nobody else could open it meanwhile
            if owner is not None:
                with contextlib.suppress(PermissionError):  # only root may give a file away
                    os.fchown(f.fileno(), *owner)
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    fsync_dir(directory)


def fsync_dir(directory: Path) -> None:
    """Make a rename in `directory` durable (where the filesystem lets a directory be opened)."""
    try:
        dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass  # some filesystems refuse fsync on a directory; the rename itself is done
    finally:
        os.close(dfd)
