#!/usr/bin/python3
"""A backup's secrets archive (secrets.tar, decrypted) put back on a rebuilt master: the cluster PKI
and the toolkit's own secrets, where they were.

The archive is checked whole before anything is written. age authenticates a file against the
key it was encrypted to, and anyone who has the site's public recipient can encrypt: so the
archive is data, and only what a backup holds is written. Every member must be a regular file or
a directory under one of `paths` (etc/kubernetes/pki, etc/appliance), with a plain relative name
(no `..`, no absolute path, no control character); members under `skip` (helm-values/: read by
hand, never written) are left out. A link, a device or any other member fails the task, naming it,
and nothing is written. A directory on the master that is a symlink is refused too.

Files are written atomically (module_utils/node_files.py), owned by root, their group the
archive's when that group exists here (else root), with the archive's permission bits. A file
already the same is left alone: a second run changes nothing. Stdlib only."""

from __future__ import annotations

import grp
import os
import re
import stat
import tarfile
from typing import Any

from ansible.module_utils.node_files import sync_directory, write_atomically

DOCUMENTATION = r"""
module: secrets_unpacked
short_description: The secrets of an appliance backup put back under dest, only under the allowed paths
options:
  src: {type: path, required: true, description: The decrypted secrets.tar on the node.}
  dest: {type: path, default: /, description: The root the archive's relative names are under.}
  paths: {type: list, elements: str, required: true, description: Relative directories the archive may write.}
  skip: {type: list, elements: str, default: [], description: Relative directories left out.}
"""

RETURN = r"""
written: {description: The files written (or that check mode would write)., type: list, elements: str}
files: {description: How many files the archive holds under paths., type: int}
"""

_PART = re.compile(r"[A-Za-z0-9_@%+=:,.-]+")


class ArchiveError(Exception):
    """The archive holds something a backup does not."""


def _under(name: str, prefixes: list[str]) -> bool:
    return any(name == p or name.startswith(p + "/") for p in prefixes)


def plan(archive: tarfile.TarFile, paths: list[str], skip: list[str]) -> list[tarfile.TarInfo]:
    """The members to write, in the archive's order; ArchiveError for anything a backup does not hold."""
    out = []
    for m in archive.getmembers():
        name = m.name[2:] if m.name.startswith("./") else m.name
        name = name.rstrip("/")
        parts = name.split("/")
        if not name or any(p in ("", ".", "..") or not _PART.fullmatch(p) for p in parts):
            raise ArchiveError(f"member {m.name!r} is not a plain relative name")
        if _under(name, skip):
            continue
        if not _under(name, paths):
            raise ArchiveError(f"member {m.name!r} is outside {' and '.join(paths)}")
        if not (m.isfile() or m.isdir()):
            raise ArchiveError(f"member {m.name!r} is not a regular file or a directory")
        m.name = name
        out.append(m)
    if not any(m.isfile() for m in out):
        raise ArchiveError(f"it holds no file under {' or '.join(paths)}")
    return out


def _gid(member: tarfile.TarInfo) -> int:
    try:
        return grp.getgrnam(member.gname).gr_gid if member.gname else 0
    except KeyError:
        return 0


def _real_dir(dest: str, rel: str) -> str:
    """dest/rel, each existing component a real directory (not a symlink) or none yet."""
    path = dest
    for part in rel.split("/"):
        path = os.path.join(path, part)
        if os.path.islink(path):
            raise ArchiveError(f"{path} on the master is a symlink")
        if os.path.exists(path) and not os.path.isdir(path):
            raise ArchiveError(f"{path} on the master is not a directory")
    return path


def _same(path: str, data: bytes, mode: int, gid: int) -> bool:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    if not stat.S_ISREG(st.st_mode) or stat.S_IMODE(st.st_mode) != mode or (st.st_uid, st.st_gid) != (0, gid):
        return False
    with open(path, "rb") as f:
        return f.read() == data


def converge(src: str, dest: str, paths: list[str], skip: list[str], check: bool) -> dict[str, Any]:
    written: list[str] = []
    with tarfile.open(src, "r:") as archive:
        members = plan(archive, paths, skip)
        for m in members:  # every path checked before anything is written
            _real_dir(dest, m.name if m.isdir() else os.path.dirname(m.name))
            if m.isfile() and os.path.islink(os.path.join(dest, m.name)):
                raise ArchiveError(f"{os.path.join(dest, m.name)} on the master is a symlink")
        for m in members:  # the directories first, with the archive's bits
            if m.isdir():
                path = os.path.join(dest, m.name)
                if not check:
                    os.makedirs(path, mode=0o755, exist_ok=True)
                    os.chmod(path, m.mode & 0o7777)
                    if os.geteuid() == 0:
                        os.chown(path, 0, _gid(m))
        files = [m for m in members if m.isfile()]
        for m in files:
            parent = os.path.join(dest, os.path.dirname(m.name))
            f = archive.extractfile(m)
            if f is None:
                raise ArchiveError(f"member {m.name!r} cannot be read")
            data, mode, gid = f.read(), m.mode & 0o7777, _gid(m)
            path = os.path.join(dest, m.name)
            if _same(path, data, mode, gid):
                continue
            written.append("/" + m.name if dest == "/" else path)
            if not check:
                os.makedirs(parent, mode=0o755, exist_ok=True)
                write_atomically(path, data, mode, gid=gid, sync_dir=False)
        if not check:
            for d in sorted({os.path.dirname(os.path.join(dest, m.name)) for m in files}):
                sync_directory(d)
    return {"changed": bool(written), "written": written, "files": len(files)}


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={
            "src": {"type": "path", "required": True},
            "dest": {"type": "path", "default": "/"},
            "paths": {"type": "list", "elements": "str", "required": True},
            "skip": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        module.exit_json(**converge(p["src"], p["dest"], p["paths"], p["skip"], module.check_mode))
    except (ArchiveError, tarfile.TarError) as exc:
        module.fail_json(msg=f"secrets.tar: {exc}: nothing was put back")
    except OSError as exc:
        module.fail_json(msg=f"putting back secrets.tar under {p['dest']}: {exc}")


if __name__ == "__main__":
    main()
