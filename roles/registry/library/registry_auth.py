#!/usr/bin/python3
"""The registry's pull account on the master: a generated password in a root-only file and its
bcrypt entry in htpasswd (the real htpasswd tool), repaired when it no longer matches.

One module instead of nine tasks (each a round trip on every run). The password is returned for
the nodes' container runtimes: the task that calls this module must be no_log.
Stdlib only, Python >= 3.8."""

from __future__ import annotations

import os
import secrets
from typing import Any

from ansible.module_utils.node_files import owned, printable, read_text
from ansible.module_utils.registry_files import group_id

DOCUMENTATION = r"""
module: registry_auth
short_description: Pull password and htpasswd entry of the private registry
description:
  - C(password_file) is created once (48 hex characters from the OS's CSPRNG, written under
    umask 077) and kept root:root 0600; C(auth_dir) root:C(group) 0750.
  - The htpasswd entry for C(username) is checked with C(htpasswd -v) and (re)written with
    C(htpasswd -B) when missing or wrong; the file is root:C(group) 0640.
  - Returns the password (call it with no_log) and whether the registry must restart.
options:
  auth_dir: {type: path, required: true, description: Directory of the password and htpasswd files.}
  group: {type: str, required: true, description: Group that may read htpasswd (the registry's).}
  username: {type: str, required: true, description: The pull account.}
  password_file: {type: path, required: true, description: Root-only file holding the password.}
  htpasswd_file: {type: path, required: true, description: The registry's htpasswd file.}
"""

RETURN = r"""
password: {description: The pull password (empty in check mode before it exists)., type: str}
htpasswd_written: {description: The htpasswd entry was (re)written: restart the registry., type: bool}
"""


def converge(module: Any) -> dict[str, Any]:
    p, check = module.params, module.check_mode
    changed = False
    gid = group_id(module, p["group"])

    if not os.path.isdir(p["auth_dir"]):
        changed = True
        if not check:
            os.makedirs(p["auth_dir"], mode=0o750)
    changed |= owned(p["auth_dir"], gid, 0o750, check)

    password = ""
    if os.path.exists(p["password_file"]):
        password = read_text(p["password_file"]) or ""
        if password != printable(password) or not password.strip():
            # every node's runtime pulls with it: never guessed at, never silently replaced
            module.fail_json(
                msg=f"{p['password_file']}: damaged (empty, or bytes that are not UTF-8); restore it from"
                " the last `appliance backup`, or remove it and run `appliance install` again for a new one"
            )
        password = password.strip()
        changed |= owned(p["password_file"], 0, 0o600, check)
    elif check:  # a fresh master in check mode: nothing generated yet
        return {"changed": True, "password": "", "htpasswd_written": True}
    else:  # created 0600 and exclusively: never readable by others, never overwritten
        password = secrets.token_hex(24)
        fd = os.open(p["password_file"], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(password + "\n")
        changed = True

    entry_ok = False
    if os.path.exists(p["htpasswd_file"]):
        # 0: matches; 3: wrong password or no such user; other codes: an entry it cannot read
        # (e.g. a damaged hash): each but 0 means the entry is rewritten
        rc, _out, _err = module.run_command(
            ["htpasswd", "-v", "-i", p["htpasswd_file"], p["username"]], data=password, binary_data=True
        )
        entry_ok = rc == 0
    if not entry_ok and not check:
        create = [] if os.path.exists(p["htpasswd_file"]) else ["-c"]
        rc, _out, err = module.run_command(
            ["htpasswd", "-B", "-i", *create, p["htpasswd_file"], p["username"]],
            data=password,
            binary_data=True,
        )
        if rc != 0:
            module.fail_json(msg=f"htpasswd -B failed on {p['htpasswd_file']}: {err.strip()}")
    changed |= not entry_ok
    changed |= owned(p["htpasswd_file"], gid, 0o640, check)
    return {"changed": changed, "password": password, "htpasswd_written": not entry_ok}


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={
            "auth_dir": {"type": "path", "required": True},
            "group": {"type": "str", "required": True},
            "username": {"type": "str", "required": True},
            "password_file": {"type": "path", "required": True, "no_log": False},
            "htpasswd_file": {"type": "path", "required": True},
        },
        supports_check_mode=True,
    )
    try:
        module.exit_json(**converge(module))
    except OSError as exc:
        module.fail_json(msg=f"registry auth: {exc}")


if __name__ == "__main__":
    main()
