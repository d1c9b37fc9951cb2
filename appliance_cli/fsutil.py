"""Replacing a file whole: the one implementation (kubeconfigs, bundle files, site files). And
reading one named by data (the site config, a bundle): a regular file, never a FIFO or device.

A fresh temporary file beside the target (mkstemp: O_EXCL, so never a file or link someone else
placed there), its mode set before any byte is written, fsync, rename over the target, fsync of
the directory: a reader sees the old file or the new one, never half, and a crash keeps one.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO


def atomic_write(
    path: Path, data: bytes | str, mode: int = 0o644, owner: tuple[int, int] | None = None
) -> None:
    """Replace `path` (the name itself: a symlink there is replaced, not followed) with `data`,
    mode `mode` exactly (no umask), owned by `owner` (uid, gid) where allowed. OSError propagates;
    the temporary file is gone either way."""
    with atomic_stream(path, mode, owner) as f:
        f.write(data.encode() if isinstance(data, str) else data)


def write_if_changed(path: Path, data: bytes | str, mode: int = 0o644) -> bool:
    """atomic_write, unless `path` is already a regular file holding `data` with `mode`: a re-run
    that changes nothing touches nothing (no temporary file beside it, no new inode), so a reader
    meanwhile never meets one. True when written; OSError propagates from the write."""
    raw = data.encode() if isinstance(data, str) else data
    try:
        st = path.lstat()
        same_kind = stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == mode
        if same_kind and st.st_size == len(raw) and read_regular(path, len(raw)) == raw:
            return False
    except OSError:
        pass  # missing, swapped, unreadable: the write below replaces it or raises
    atomic_write(path, raw, mode)
    return True


@contextlib.contextmanager
def atomic_stream(path: Path, mode: int = 0o644, owner: tuple[int, int] | None = None) -> Iterator[BinaryIO]:
    """atomic_write for content written piece by piece (a tarball, a download): the file object
    of the temporary file; on leaving the block it is fsynced and renamed over `path`, on an
    exception removed (the exception propagates)."""
    directory = path.parent
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), mode)  # mkstemp made it 0600; nobody else could open it meanwhile
            if owner is not None:
                with contextlib.suppress(PermissionError):  # only root may give a file away
                    os.fchown(f.fileno(), *owner)
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    fsync_dir(directory)


@contextlib.contextmanager
def atomic_path(path: Path, mode: int | None = None) -> Iterator[Path]:
    """atomic_stream for a tool that writes by name (mmdebstrap, a packer given an output path):
    a name with `path`'s own (its extension tells some tools the format), not yet created, in a
    fresh private directory beside `path`. On leaving the block the file the tool wrote is
    fsynced, given `mode` (None: as the tool made it) and renamed over `path`; on an exception
    (FileNotFoundError when the tool wrote nothing) removed with its directory."""
    scratch = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        tmp = scratch / path.name
        yield tmp
        fd = os.open(tmp, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            if mode is not None:
                os.fchmod(fd, mode)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    fsync_dir(path.parent)


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


def read_regular(path: Path, limit: int | None = None) -> bytes:
    """The bytes of `path`, a regular file (a symlink to one is followed); OSError otherwise, at
    once: "not a regular file" for a FIFO (the read waited for a writer forever), a directory or
    a device (/dev/zero read until memory ran out); "larger than ..." past `limit` bytes."""
    if not stat.S_ISREG(os.stat(path).st_mode):  # before open: opening a device can act on it
        raise OSError(errno.EINVAL, "not a regular file", str(path))
    # O_NONBLOCK: a FIFO swapped in after the stat opens without a writer, refused by fstat below
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    with open(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        data = f.read() if limit is None else f.read(limit + 1)
    if limit is not None and len(data) > limit:
        size = f"{limit // 1024**2} MiB" if limit >= 1024**2 else f"{limit} bytes"
        raise OSError(errno.EFBIG, f"larger than {size}", str(path))
    return data
