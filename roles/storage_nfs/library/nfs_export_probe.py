#!/usr/bin/python3
"""Is the NFS export reachable and writable from this node? Asked with the userspace client
(libnfs-utils), as root (uid 0 in the URL), so it works where the kernel cannot mount (the lab)
and says what the provisioner's root will meet.

libnfs-utils in Debian 12 / Ubuntu 20.04 has nfs-ls, nfs-cp and nfs-cat only (no nfs-rm,
no nfs-stat): the export is listed with `nfs-ls -s` (which also prints its free space), a probe
file is written with nfs-cp, and removed through libnfs itself (ctypes; libnfs-utils depends on
it). Changes nothing on the node; on the export, the probe file lives for the blink of an eye.
Stdlib only, Python >= 3.8 (Ubuntu 20.04 nodes)."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import re
import shutil
import subprocess
import tempfile
from typing import Any

DOCUMENTATION = r"""
module: nfs_export_probe
short_description: Check an NFS export is reachable and writable from this node (userspace client)
description:
  - Lists the export (C(nfs-ls -s)), writes a small probe file (C(nfs-cp)) and removes it (libnfs).
  - Never fails for an export problem: it returns C(problem) (C(not reachable), C(read-only),
    C(not writable), C(no client)) and C(detail), so one task can report every node at once.
options:
  server: {description: NFS server address., type: str, required: true}
  path: {description: Exported path., type: str, required: true}
  node: {description: This node's name (the probe file is .appliance-probe-NODE in the export's top directory)., type: str, required: true}
  timeout: {description: Seconds each NFS call may take., type: int, default: 10}
"""

RETURN = r"""
problem: {description: Empty when reachable and writable, else what is wrong., type: str}
detail: {description: The client's own words for it., type: str}
free_bytes: {description: Free space of the export (nfs-ls -s), -1 when unknown., type: int}
node: {description: The node's name, as given., type: str}
summary: {description: "'NODE: PROBLEM (DETAIL)' when there is a problem, else empty.", type: str}
"""

FREE = re.compile(r"^\s*(\d+) of\s+(\d+) bytes free", re.M)
TIMED_OUT = 124
NFS_ERROR = re.compile(r"\b(NFS\d?ERR|MNT\d?ERR)_[A-Z_]+(\(-?\d+\))?")


def url(server: str, path: str, name: str = "") -> str:
    base = f"nfs://{server}/{path.strip('/')}"
    return f"{base}/{name}?uid=0&gid=0" if name else f"{base}?uid=0&gid=0"


def _run(argv: list[str], timeout: int) -> tuple[int, str, str]:
    """(rc, stdout, the first line of what it said, errors first)."""
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return TIMED_OUT, "", f"no answer within {timeout}s"
    lines = [ln.strip() for ln in (r.stderr + "\n" + r.stdout).splitlines() if ln.strip()]
    return r.returncode, r.stdout, lines[0] if lines else ""


def classify_write(detail: str) -> str:
    if "ROFS" in detail or "Read-only" in detail:
        return "read-only"
    return "not writable"


def unlink(server: str, path: str, name: str) -> str:
    """Remove the probe file through libnfs; '' or why not."""
    lib_name = ctypes.util.find_library("nfs") or "libnfs.so.13"
    try:
        lib = ctypes.CDLL(lib_name)
    except OSError as exc:
        return f"libnfs not loadable: {exc}"
    lib.nfs_init_context.restype = ctypes.c_void_p
    lib.nfs_get_error.restype = ctypes.c_char_p
    lib.nfs_get_error.argtypes = [ctypes.c_void_p]
    lib.nfs_set_uid.argtypes = lib.nfs_set_gid.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.nfs_mount.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p]
    lib.nfs_unlink.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    lib.nfs_destroy_context.argtypes = [ctypes.c_void_p]
    ctx = lib.nfs_init_context()
    if not ctx:
        return "libnfs: no context"
    try:
        lib.nfs_set_uid(ctx, 0)
        lib.nfs_set_gid(ctx, 0)
        if lib.nfs_mount(ctx, server.encode(), path.encode()) or lib.nfs_unlink(ctx, f"/{name}".encode()):
            return (lib.nfs_get_error(ctx) or b"?").decode(errors="replace")
        return ""
    finally:
        lib.nfs_destroy_context(ctx)


def result(node: str, server: str, path: str, timeout: int) -> dict[str, Any]:
    """probe() of the node's own probe file, with the node named and a one-line summary."""
    out = probe(server, path, f".appliance-probe-{node}", timeout)
    out["node"] = node
    out["summary"] = f"{node}: {out['problem']} ({out['detail']})" if out["problem"] else ""
    return out


def probe(server: str, path: str, name: str, timeout: int) -> dict[str, Any]:
    out: dict[str, Any] = {"changed": False, "problem": "", "detail": "", "free_bytes": -1}
    if not (shutil.which("nfs-ls") and shutil.which("nfs-cp")):
        out.update(problem="no client", detail="nfs-ls/nfs-cp missing (package libnfs-utils)")
        return out
    rc, listing, text = _run(["nfs-ls", "-s", url(server, path)], timeout)
    if rc != 0:
        out.update(problem="not reachable", detail=text or f"nfs-ls exit {rc}")
        return out
    m = FREE.search(listing)
    if m:
        out["free_bytes"] = int(m.group(1))
    with tempfile.NamedTemporaryFile("w", prefix="appliance-nfs-probe.", delete=False) as f:
        f.write("appliance storage_nfs write probe\n")
    try:
        rc, _, text = _run(["nfs-cp", f.name, url(server, path, name)], timeout)
    finally:
        os.unlink(f.name)
    if rc != 0:
        code = NFS_ERROR.search(text)  # the server's answer, without the probe file's name
        out.update(
            problem=classify_write(text),
            detail=f"nfs-cp: {code.group(0)}" if code else text or f"nfs-cp exit {rc}",
        )
        return out
    why = unlink(server, path, name)
    if why:
        out["warning"] = f"the probe file {name} could not be removed: {why}"
    return out


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={
            "server": {"type": "str", "required": True},
            "path": {"type": "str", "required": True},
            "node": {"type": "str", "required": True},
            "timeout": {"type": "int", "default": 10},
        },
        supports_check_mode=True,
    )
    p = module.params
    module.exit_json(**result(p["node"], p["server"], p["path"], p["timeout"]))


if __name__ == "__main__":
    main()
