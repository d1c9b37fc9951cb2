#!/usr/bin/python3
"""One operation's resumable state on the master (kube_upgrade, chart_upgrade, etcd_restore):
read it, or merge a change into it, in the shared file's own key (module_utils/resumable_state.py
holds the layout, the lock and the atomic write). Stdlib only, Python >= 3.8 on the node."""

from __future__ import annotations

import re

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.resumable_state import StateError, merge, read

DOCUMENTATION = r"""
module: resumable_state
short_description: Read or merge one operation's key of a resumable state file
description:
  - "The file holds C({"schema": 1, KEY: {...}, ...}): this module reads or changes KEY only, under
    an exclusive lock (PATH.lock), written atomically (mkstemp, fsync, rename, fsync of the
    directory), root-owned 0600; its directory is created 0700."
  - "A file without C(schema) (the toolkit before it) is read as its legacy flat layout and
    rewritten in this one at the first merge. A file of a newer schema, or not JSON, fails the task
    naming the file."
  - "Check mode reads, and reports what a merge would change; it writes nothing."
options:
  path: {description: The state file., type: path, required: true}
  key: {description: The operation's key in it (lower case and underscores)., type: str, required: true}
  state:
    description: read; merge C(value)'s fields into the key's object; or replace it by C(value) (an operation starting afresh).
    type: str
    choices: [read, merge, replace]
    default: read
  value: {description: The fields to set (merge) or the whole object (replace)., type: dict, default: {}}
  add:
    description:
      - "With merge or replace: list fields and the items to append to each, each item once, to the
        list as the file holds it under the lock (not as the task last read it). A field absent
        starts empty; a field that is not a list fails the task."
    type: dict
    default: {}
"""

RETURN = r"""
value: {description: The key's object after the task ({} when the file has none)., type: dict}
ansible_facts:
  description: The same as the fact C(resumable_state_KEY).
  type: dict
"""

KEY = re.compile(r"[a-z][a-z0-9_]*")


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "key": {"type": "str", "required": True},
            "state": {"type": "str", "choices": ["read", "merge", "replace"], "default": "read"},
            "value": {"type": "dict", "default": {}},
            "add": {"type": "dict", "default": {}},
        },
        supports_check_mode=True,
    )
    path, key = module.params["path"], module.params["key"]
    if not KEY.fullmatch(key):
        module.fail_json(msg=f"key {key!r}: lower case letters, digits and underscores only")
    add = module.params["add"]
    for field, items in add.items():
        if not isinstance(items, list):
            module.fail_json(msg=f"add.{field}: a list of items to append")
    if add and module.params["state"] == "read":
        module.fail_json(msg="add: only with state merge or replace")
    try:
        if module.params["state"] == "read":
            before = after = read(path, key)
            changed = False
        else:
            state = module.params["state"]
            before, after, changed = merge(
                path,
                key,
                module.params["value"],
                check_mode=module.check_mode,
                replace=state == "replace",
                add=add,
            )
    except (StateError, OSError) as e:
        module.fail_json(msg=str(e))
    result = {"changed": changed, "value": after, "ansible_facts": {f"resumable_state_{key}": after}}
    if module._diff and before != after:
        result["diff"] = {
            "before": before,
            "after": after,
            "before_header": f"{path} {key}",
            "after_header": f"{path} {key}",
        }
    module.exit_json(**result)


if __name__ == "__main__":
    main()
