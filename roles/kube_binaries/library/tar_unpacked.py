#!/usr/bin/python3
"""A flat release tarball (the CNI plugins) unpacked into a directory, checked cheaply on a re-run.

ansible.builtin.unarchive compares the whole archive with the directory on every run (gzip and
`tar --diff` over some 70 MB, 1.8 to 3.8 s on four nodes sharing two cores). This module keeps a
record beside the tarball: the tarball's sha256 and the sha256 of each file it unpacked. A re-run
hashes only the unpacked files against the record, and unpacks again when the tarball is another
one, the record is missing, or a file is gone or differs: drift is still repaired.

Every member must be a regular file with a plain name (the archive's `./` entry aside): a link,
a device, a subdirectory or a name with a path in it fails the task naming it, before anything is
written. Each file is written atomically (module_utils/node_files.py: a temporary file in the
directory, fsync, rename), root:root with the member's permission bits. Stdlib only."""

from __future__ import annotations

import hashlib
import json
import os
import re
import tarfile
from typing import Any

from ansible.module_utils.bundle_manifest import sha256_of
from ansible.module_utils.node_files import sync_directory, write_atomically

DOCUMENTATION = r"""
module: tar_unpacked
short_description: A flat tarball unpacked into a directory, re-checked by the sha256 of what it unpacked
options:
  src: {type: path, required: true, description: The tarball on the node.}
  src_sha256: {type: str, required: true, description: Its sha256 (the bundle manifest's), the record's key.}
  dest: {type: path, required: true, description: The directory to unpack into (it must exist).}
  record: {type: path, required: true, description: Where the record of the last unpack is kept.}
"""

RETURN = r"""
unpacked: {description: The files written (or that check mode would write)., type: list, elements: str}
reason: {description: Why it unpacked; empty when everything was as recorded., type: str}
"""

MEMBER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")
SHA256 = re.compile(r"[0-9a-f]{64}")


class ArchiveError(Exception):
    """The tarball holds something this module will not write."""


def members(archive: tarfile.TarFile) -> list[tuple[str, tarfile.TarInfo]]:
    """(plain name, member) of each file, in the archive's order; refuses anything but regular
    files with plain names (the top `./` directory entry is skipped)."""
    out = []
    for m in archive.getmembers():
        name = m.name[2:] if m.name.startswith("./") else m.name
        if m.isdir() and name in ("", "."):
            continue
        if not m.isfile():
            raise ArchiveError(f"member {m.name!r} is not a regular file")
        if not MEMBER_NAME.fullmatch(name):
            raise ArchiveError(f"member {m.name!r} is not a plain file name")
        out.append((name, m))
    if not out:
        raise ArchiveError("it holds no file")
    return out


def drift(record: dict[str, Any] | None, src_sha256: str, dest: str) -> str:
    """Why the directory is not as the record says ('' when it is): another tarball, no record,
    or a recorded file missing or different."""
    if not record or record.get("src_sha256") != src_sha256 or record.get("dest") != dest:
        return "no record of this tarball unpacked here"
    for name, digest in sorted((record.get("files") or {}).items()):
        path = os.path.join(dest, name)
        if not os.path.isfile(path) or os.path.islink(path):
            return f"{name} is missing"
        if sha256_of(path) != f"sha256:{digest}":
            return f"{name} differs from the tarball's"
        st = os.stat(path)
        if (st.st_uid, st.st_gid) != (0, 0):
            return f"{name} is not owned by root"
    return ""


def unpack(src: str, dest: str) -> dict[str, str]:
    """Every file of the tarball written into dest; name -> sha256 of each."""
    written: dict[str, str] = {}
    with tarfile.open(src, "r:*") as archive:
        for name, m in members(archive):
            f = archive.extractfile(m)
            if f is None:
                raise ArchiveError(f"member {m.name!r} cannot be read")
            data = f.read()
            write_atomically(os.path.join(dest, name), data, m.mode & 0o755, sync_dir=False)
            written[name] = hashlib.sha256(data).hexdigest()
    sync_directory(dest)
    return written


def converge(module: Any) -> dict[str, Any]:
    p = module.params
    if not SHA256.fullmatch(p["src_sha256"]):
        module.fail_json(msg=f"src_sha256 {p['src_sha256']!r} is not a sha256 digest")
    record = None
    if os.path.exists(p["record"]):
        try:
            with open(p["record"], encoding="utf-8") as f:
                record = json.load(f)
        except ValueError:
            record = None  # unreadable: unpack again, which rewrites it
    reason = drift(record, p["src_sha256"], p["dest"])
    if not reason:
        return {"changed": False, "unpacked": [], "reason": ""}
    if module.check_mode:
        names: list[str] = []
        if os.path.exists(p["src"]):
            with tarfile.open(p["src"], "r:*") as archive:
                names = [n for n, _ in members(archive)]
        return {"changed": True, "unpacked": names, "reason": reason}
    files = unpack(p["src"], p["dest"])
    text = json.dumps(
        {"src_sha256": p["src_sha256"], "dest": p["dest"], "files": files}, indent=1, sort_keys=True
    )
    write_atomically(p["record"], (text + "\n").encode(), 0o644)
    return {"changed": True, "unpacked": sorted(files), "reason": reason}


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={
            "src": {"type": "path", "required": True},
            "src_sha256": {"type": "str", "required": True},
            "dest": {"type": "path", "required": True},
            "record": {"type": "path", "required": True},
        },
        supports_check_mode=True,
    )
    try:
        module.exit_json(**converge(module))
    except (ArchiveError, tarfile.TarError) as exc:
        module.fail_json(msg=f"{module.params['src']}: {exc}: not unpacked into {module.params['dest']}")
    except OSError as exc:
        module.fail_json(msg=f"unpacking {module.params['src']} into {module.params['dest']}: {exc}")


if __name__ == "__main__":
    main()
