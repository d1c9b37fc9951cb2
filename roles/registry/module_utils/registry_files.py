"""Ownership helpers shared by the registry role's modules (stdlib only, Python >= 3.8)."""

from __future__ import annotations

import grp
import os
from typing import Any


def group_id(module: Any, group: str) -> int:
    """The gid of the registry's group; a clear failure when it is missing (check mode: root's,
    since on a fresh master the package that creates it is not installed yet)."""
    try:
        return grp.getgrnam(group).gr_gid
    except KeyError:
        if not module.check_mode:
            module.fail_json(msg=f"group {group} does not exist (is the registry package installed?)")
        return 0


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
