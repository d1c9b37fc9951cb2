"""Reading the offline bundle's manifest on a node: shared by bundle_repo's modules (bundle_sync,
bundle_view) and the registry's (registry_seed). Stdlib only, Python >= 3.8 on the node. Each
caller passes its own error class, so its failures keep their one-line, user-facing form."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import stat
from typing import Any, BinaryIO

MANIFEST = "manifest.json"
SCHEMA = "appliance-bundle"
HEX_RE = re.compile(r"[0-9a-f]{64}")
READ_SIZE = 1 << 20


def hex_of(digest: str, error: type[Exception], what: str = "manifest lists an invalid digest") -> str:
    """The hex part of a 'sha256:<64 hex>' digest; `error(what …)` for anything else."""
    algo, _, hexd = str(digest).partition(":")
    if algo != "sha256" or not HEX_RE.fullmatch(hexd):
        raise error(f"{what} {digest!r}")
    return hexd


def read_manifest(
    bundle: str,
    error: type[Exception],
    missing: str,
    require_schema: bool = False,
    refuse_links: type[Exception] | None = None,
) -> tuple[dict[str, Any], bytes]:
    """(the manifest, its exact bytes) of the bundle directory `bundle`. `missing` is the message
    when there is none ({path} and {bundle} are filled in). With `refuse_links`, a manifest.json
    that is a symlink or not a regular file raises that error (a bundle holds neither)."""
    path = os.path.join(bundle, MANIFEST)
    try:
        with open_regular(path, refuse_links) if refuse_links else open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise error(missing.format(path=path, bundle=bundle)) from None
    try:
        data = json.loads(raw.decode("utf-8"))
    except ValueError as exc:
        raise error(f"{path} is not valid JSON: {exc}") from None
    if require_schema and (not isinstance(data, dict) or data.get("schema") != SCHEMA):
        raise error(f"{path} is not an appliance bundle manifest")
    return data, raw


def open_regular(path: str, error: type[Exception]) -> BinaryIO:
    """`path` opened for reading if it is a regular file, not through a symlink (O_NOFOLLOW; a
    FIFO or device is refused without blocking on it); FileNotFoundError when absent."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise error(f"{path} is a symlink, refused (a bundle holds none)") from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise error(f"{path} is not a regular file, refused")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def free_bytes(path: str) -> int:
    """Free bytes for an unprivileged writer on the filesystem that holds (or will hold) `path`."""
    while not os.path.exists(path):
        path = os.path.dirname(path) or "/"
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def mib(n: int) -> str:
    """Bytes as an engineer reads them in a disk-space error: '93.7 MiB'."""
    return f"{n / 2**20:.1f} MiB"


def sha256_of(path: str) -> str:
    """'sha256:<hex>' of a file."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for buf in iter(lambda: f.read(READ_SIZE), b""):
            h.update(buf)
    return "sha256:" + h.hexdigest()
