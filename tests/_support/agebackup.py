"""An encrypted backup read back the way an operator would: the file fetched from the master,
opened on the controller with age and the identity kept there (the lab's site/backup-identity.txt).
Nothing decrypted is written anywhere but the caller's memory, except where a test puts a
snapshot back on the master for etcdctl to read (and removes it)."""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path

IDENTITY = "backup-identity.txt"  # appliance_cli/lab/sitegen.py BACKUP_IDENTITY, read here on its own


def identity(site_dir: Path) -> Path:
    path = site_dir / IDENTITY
    assert path.is_file(), f"{path}: no age identity for this site's backups (the lab writes one)"
    return path


def fetch(host, path: str) -> bytes:  # type: ignore[no-untyped-def]
    """A file on a testinfra host, as bytes (base64 over the command's text output)."""
    return base64.b64decode(host.check_output(f"base64 -w0 {path}"))


def decrypt(ident: Path, data: bytes) -> subprocess.CompletedProcess[bytes]:
    """`age --decrypt` on the controller: returncode, stdout (the plaintext), stderr."""
    return subprocess.run(
        ["age", "--decrypt", "--identity", str(ident)],
        input=data,
        capture_output=True,
        check=False,
        timeout=120,
    )


def plaintext(ident: Path, host, path: str) -> bytes:  # type: ignore[no-untyped-def]
    out = decrypt(ident, fetch(host, path))
    assert out.returncode == 0, f"{path}: {out.stderr.decode(errors='replace')}"
    return out.stdout
