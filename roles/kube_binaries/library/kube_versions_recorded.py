#!/usr/bin/python3
"""The installed Kubernetes binaries' versions, recorded as a local fact, in one task: the record
read, the binaries asked only when one was downloaded again or the record disagrees with the
bundle, each checked against the version the signed manifest declares for it (and that version
against the wanted release), and the record written (atomically) only when it changes.

Before this module the same took a slurp, a set_fact and a conditional include on every node of
every run, and on a change five more tasks. `installed_at` moves only when a version changes, so
a re-run changes nothing. upgrade planning (kube_upgrade) reads the record. Each binary is asked
through an argv list. In check mode it asks (read-only) and writes nothing. Stdlib only,
Python >= 3.8 (Ubuntu 20.04 nodes)."""

from __future__ import annotations

import json
import re
import time
from typing import Any

from ansible.module_utils.node_files import converge_file, read_text

DOCUMENTATION = r"""
module: kube_versions_recorded
short_description: The Kubernetes binaries' versions, asked when needed, checked and recorded
options:
  record: {type: path, required: true, description: The local fact file (JSON).}
  tools: {type: list, elements: str, required: true, description: "The Kubernetes binaries (kubeadm, kubelet, kubectl); crictl is asked too."}
  declared: {type: dict, required: true, description: Each tool's version as the signed manifest declares it.}
  bundled_for: {type: dict, required: true, description: The Kubernetes release each tool is bundled for.}
  kubernetes: {type: str, required: true, description: The wanted release (recorded as kubernetes).}
  cni_version: {type: str, required: true, description: The CNI plugins' release as the bundle names it (recorded).}
  reinstalled: {type: bool, default: false, description: This run downloaded a binary again; ask them whatever the record says.}
"""

RETURN = r"""
probed: {description: Whether the binaries were asked., type: bool}
versions: {description: The record (without installed_at) after this run., type: dict}
"""

# What each binary is asked, and how its answer reads (upstream 1.23's output formats).
PROBES = {
    "kubeadm": ["kubeadm", "version", "-o", "short"],  # v1.23.17
    "kubelet": ["kubelet", "--version"],  # Kubernetes v1.23.17
    "kubectl": ["kubectl", "version", "--client", "-o", "json"],  # {"clientVersion": {"gitVersion": ...}}
    "crictl": ["crictl", "--version"],  # crictl version v1.23.0
}


def read_version(name: str, out: str) -> str:
    if name == "kubelet":
        return re.sub(r"^Kubernetes\s+", "", out.strip())
    if name == "kubectl":
        return str(json.loads(out)["clientVersion"]["gitVersion"])
    if name == "crictl":
        return out.strip().split()[-1]
    return out.strip()


def recorded(path: str) -> dict[str, Any]:
    """The last record, or {} when there is none or it cannot be read (then it is rewritten)."""
    try:
        value = json.loads(read_text(path) or "{}")
    except ValueError:  # not JSON (bytes that are not UTF-8 included)
        return {}
    return value if isinstance(value, dict) else {}


def needs_asking(p: dict[str, Any], record: dict[str, Any]) -> bool:
    """A binary was downloaded again, or the record disagrees: get_url has just checked every file
    against the bundle's sha256, so unchanged files are the very bytes that were asked last time."""
    return (
        p["reinstalled"]
        or record.get("cni_plugins") != p["cni_version"]
        or any(t not in record for t in [*p["tools"], "crictl"])
        or record.get("kubernetes") != p["kubernetes"]
        or [record.get(t) for t in p["tools"]] != [p["declared"].get(t) for t in p["tools"]]
    )


def converge(module: Any, now: Any = time.gmtime) -> dict[str, Any]:
    p = module.params
    record = recorded(p["record"])
    if not needs_asking(p, record):
        return {
            "changed": False,
            "probed": False,
            "versions": {k: v for k, v in record.items() if k != "installed_at"},
        }
    if module.check_mode and p["reinstalled"]:  # the new binaries are not there yet
        return {"changed": False, "probed": False, "versions": {}}
    installed: dict[str, str] = {}
    for name in [*p["tools"], "crictl"]:
        argv = PROBES[name]
        rc, out, err = module.run_command(argv)
        if rc != 0:
            module.fail_json(msg=f"{' '.join(argv)} failed (rc {rc}): {(err or out).strip()[:300]}")
        try:
            installed[name] = read_version(name, out)
        except (ValueError, KeyError, IndexError, TypeError):
            module.fail_json(
                msg=f"{' '.join(argv)} printed no version this module reads: {out.strip()[:300]!r}"
            )
    installed |= {"cni_plugins": p["cni_version"], "kubernetes": p["kubernetes"]}
    for t in p["tools"]:
        declared, bundled_for = p["declared"].get(t), p["bundled_for"].get(t)
        if installed[t] != declared or bundled_for != p["kubernetes"]:
            module.fail_json(
                msg=f"{t} is {installed[t]}, the bundle declares {declared} for Kubernetes {bundled_for}, "
                f"expected Kubernetes {p['kubernetes']}: the bundle holds the wrong release",
                versions=installed,
            )
    unchanged = {k: v for k, v in record.items() if k != "installed_at"} == installed
    stamp = (
        record["installed_at"]
        if unchanged and "installed_at" in record
        else time.strftime("%Y-%m-%dT%H:%M:%SZ", now())
    )
    # as Ansible's to_nice_json(indent=2) wrote it before this module: a record kept is not rewritten
    text = (
        json.dumps({**installed, "installed_at": stamp}, indent=2, sort_keys=True, separators=(",", ": "))
        + "\n"
    )
    diff = converge_file(p["record"], text, 0o644, module.check_mode)  # a record not UTF-8 included
    return {
        "changed": diff is not None,
        "probed": True,
        "versions": installed,
        **({"diff": diff} if diff else {}),
    }


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={
            "record": {"type": "path", "required": True},
            "tools": {"type": "list", "elements": "str", "required": True},
            "declared": {"type": "dict", "required": True},
            "bundled_for": {"type": "dict", "required": True},
            "kubernetes": {"type": "str", "required": True},
            "cni_version": {"type": "str", "required": True},
            "reinstalled": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    unknown = sorted(set(module.params["tools"]) - set(PROBES))
    if unknown:
        module.fail_json(msg=f"kube_versions_recorded: no way to ask {', '.join(unknown)} its version")
    try:
        module.exit_json(**converge(module))
    except OSError as exc:
        module.fail_json(msg=f"{module.params['record']}: {exc}")


if __name__ == "__main__":
    main()
