"""The registry's group, for the registry role's modules (stdlib only, Python >= 3.8); making a
file root:group with a mode is module_utils/node_files.owned."""

from __future__ import annotations

import grp
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
