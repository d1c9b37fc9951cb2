#!/usr/bin/python3
"""An htpasswd file that holds exactly the given users, each with the bcrypt hash of its given
password (the real htpasswd tool hashes and verifies): the researcher registry's site accounts.

A user whose entry still verifies keeps its hash (a re-run changes nothing), a changed password is
re-hashed, a user no longer given is dropped. The passwords come from the controller and are never
written anywhere but as bcrypt hashes in this file: the calling task must be no_log.
Stdlib only, Python >= 3.8."""

from __future__ import annotations

from typing import Any

from ansible.module_utils.node_files import owned, printable, read_text, write_atomically
from ansible.module_utils.registry_files import group_id

DOCUMENTATION = r"""
module: registry_htpasswd
short_description: An htpasswd file with exactly the given users and passwords (bcrypt)
description:
  - Each given user's entry is checked with C(htpasswd -v) and re-hashed with C(htpasswd -nB)
    when missing or no longer matching; entries of users not given are removed.
  - The file is written atomically (a temporary file in the same directory, fsync'd, then renamed),
    root:C(group) 0640.
  - Passwords are read from stdin by htpasswd, never put on a command line, never returned.
options:
  path: {type: path, required: true, description: The htpasswd file.}
  group: {type: str, required: true, description: Group that may read it (the registry's).}
  users: {type: dict, required: true, description: user name -> password (no_log).}
"""

RETURN = r"""
added: {description: Users that had no entry., type: list, elements: str}
updated: {description: Users whose password changed., type: list, elements: str}
removed: {description: Users whose entry was removed., type: list, elements: str}
"""


def parse_htpasswd(text: str) -> dict[str, str]:
    """user -> hash of each `user:hash` line (blank lines and # comments skipped; the last entry
    of a user repeated wins, as htpasswd -v reads the first: either way it is rewritten)."""
    entries: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or ":" not in line:
            continue
        user, _, digest = line.partition(":")
        entries[user] = digest
    return entries


def render_htpasswd(entries: dict[str, str]) -> str:
    """The file's text: one `user:hash` line per user, sorted by name (stable across runs)."""
    return "".join(f"{user}:{entries[user]}\n" for user in sorted(entries))


def plan(current: dict[str, str], wanted: list[str], verified: set[str]) -> dict[str, list[str]]:
    """What changes: users to add (no entry), update (an entry that no longer verifies) and
    remove (an entry for a user no longer wanted)."""
    return {
        "added": sorted(u for u in wanted if u not in current),
        "updated": sorted(u for u in wanted if u in current and u not in verified),
        "removed": sorted(u for u in current if u not in wanted),
    }


def converge(module: Any) -> dict[str, Any]:
    p, check = module.params, module.check_mode
    users: dict[str, str] = {str(k): str(v) for k, v in (p["users"] or {}).items()}
    for user, password in sorted(users.items()):
        if not password:
            module.fail_json(msg=f"researcher registry user {user}: empty password")
        if ":" in user or "\n" in password:
            module.fail_json(msg=f"researcher registry user {user}: not usable in htpasswd")
    gid = group_id(module, p["group"])
    path = p["path"]
    # a line damaged past UTF-8 is one more entry to drop or re-hash (U+FFFD where a byte was)
    text = printable(read_text(path) or "")
    current = parse_htpasswd(text)
    verified = set()
    for user in sorted(u for u in users if u in current):
        # 0: matches; anything else (wrong password, unreadable hash) means re-hash
        rc, _out, _err = module.run_command(
            ["htpasswd", "-v", "-i", path, user], data=users[user], binary_data=True
        )
        if rc == 0:
            verified.add(user)
    changes = plan(current, sorted(users), verified)
    entries = {u: current[u] for u in verified}
    if not check:
        for user in changes["added"] + changes["updated"]:
            rc, out, err = module.run_command(
                ["htpasswd", "-n", "-B", "-i", user], data=users[user], binary_data=True
            )
            line = out.strip()
            if rc != 0 or not line.startswith(f"{user}:"):
                module.fail_json(msg=f"htpasswd -nB failed for {user}: {err.strip()}")
            entries[user] = line.partition(":")[2]
    content_changed = any(changes.values()) or render_htpasswd(current) != text
    if content_changed and not check:
        write_atomically(path, render_htpasswd(entries).encode("utf-8"), 0o640, gid=gid)
    fixed = owned(path, gid, 0o640, check)
    return {"changed": content_changed or fixed, **changes}


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "group": {"type": "str", "required": True},
            "users": {"type": "dict", "required": True, "no_log": True},
        },
        supports_check_mode=True,
    )
    try:
        module.exit_json(**converge(module))
    except OSError as exc:
        module.fail_json(msg=f"researcher registry htpasswd: {exc}")


if __name__ == "__main__":
    main()
