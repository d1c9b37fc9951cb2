"""Files on a node written atomically, and a small configuration file converged to its content.

Shared by the roles' modules and module_utils (os_prereqs, registry, helm, kube_binaries,
resumable_state): the one place that says how a file that matters is written. Stdlib only,
Python >= 3.8 on the node."""

from __future__ import annotations

import os
import tempfile
from typing import Any


def read_text(path: str) -> str | None:
    """The file's text, or None when it does not exist. Bytes that are not UTF-8 (an fstab with a
    Latin-1 comment, a record left damaged) come back as lone surrogates, never an exception:
    `encode_text` gives the same bytes back, and such text never equals what a module writes."""
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as f:
            return f.read()
    except FileNotFoundError:
        return None


def encode_text(text: str) -> bytes:
    """The bytes `read_text` read `text` from (UTF-8, the undecodable bytes as they were)."""
    return text.encode("utf-8", errors="surrogateescape")


def printable(text: str) -> str:
    """`text` with each undecodable byte shown as U+FFFD: safe to return as a diff in JSON."""
    return encode_text(text).decode("utf-8", errors="replace")


def sync_directory(directory: str) -> None:
    """The directory's entries (a rename into it) survive a power cut."""
    fd = os.open(directory or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: str, data: bytes, mode: int, gid: int = 0, sync_dir: bool = True) -> None:
    """PATH holds DATA, or what it held before: never half of it, never a temporary file left.

    A temporary file in PATH's directory gets MODE and, run as root, the owner root:GID before a
    byte is written; it is fsync'd and renamed over PATH, then the directory is fsync'd (a caller
    writing many files into one directory may pass sync_dir=False and call sync_directory once)."""
    directory = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), mode)
            if os.geteuid() == 0:
                os.fchown(f.fileno(), 0, gid)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise
    if sync_dir:
        sync_directory(directory)


def owned_as(path: str, mode: int, gid: int = 0) -> bool:
    """PATH has MODE and, when this runs as root (as on a node), the owner root:GID."""
    st = os.stat(path)
    if (st.st_mode & 0o7777) != mode:
        return False
    return os.geteuid() != 0 or (st.st_uid, st.st_gid) == (0, gid)


def owned(path: str, gid: int, mode: int, check_mode: bool) -> bool:
    """Make `path` root-owned with group `gid` and `mode`; True when something had to change.
    A path that does not exist (check mode before it is made) is left to the caller."""
    if not os.path.exists(path):
        return False
    st = os.stat(path)
    if (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (0, gid, mode):
        return False
    if not check_mode:
        os.chown(path, 0, gid)
        os.chmod(path, mode)
    return True


def converge_file(
    path: str, content: str, mode: int = 0o644, check_mode: bool = False
) -> dict[str, Any] | None:
    """Make `path` hold exactly `content` (root-owned, `mode`); returns the diff when it changed
    (content, mode or owner), None when it already did."""
    before = read_text(path)
    if before == content and before is not None and owned_as(path, mode):
        return None
    if not check_mode:
        directory = os.path.dirname(path) or "."
        os.makedirs(directory, mode=0o755, exist_ok=True)
        write_atomically(path, encode_text(content), mode)
    return {
        "before": printable(before or ""),
        "after": printable(content),
        "before_header": path,
        "after_header": path,
    }
