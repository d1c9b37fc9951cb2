#!/usr/bin/python3
"""What the kubelet needs from the node's kernel, now and after a reboot: swap off, kernel
modules loaded, kernel parameters set (kubeadm's preflight checks each of them).

One module instead of eleven tasks: each task costs a round trip to every node on every run,
and a no-op run is mostly that. Stdlib only, Python >= 3.8 (Ubuntu 20.04 nodes)."""

from __future__ import annotations

import os
import platform
import re
from typing import Any

from ansible.module_utils.node_files import converge_file, read_text

DOCUMENTATION = r"""
module: kernel_prereqs
short_description: Swap off, kernel modules and kernel parameters for kubeadm, now and at boot
description:
  - "Swap: C(swapoff -a) when C(/proc/swaps) lists a device; swap lines of C(fstab) commented out."
  - "Modules: C(modules_file) written; each module not active (C(/sys/module/NAME), or built into
    the kernel per C(modules.builtin)) is loaded with C(modprobe)."
  - "Parameters: C(sysctl_file) written; each parameter whose live value (C(/proc/sys)) differs is
    set with C(sysctl -w)."
  - "With C(host_owned) (a container node: its kernel is the host's), a module or parameter that
    cannot be applied is returned in C(appliance_warnings) with the reason (the CLI shows each as a
    warning naming the node); otherwise the module fails naming it."
options:
  swap_off: {description: Turn swap off now and in fstab., type: bool, default: true}
  fstab: {description: The fstab to edit., type: path, default: /etc/fstab}
  modules: {description: Kernel modules to load., type: list, elements: str, default: []}
  modules_file: {description: modules-load.d file., type: path, default: /etc/modules-load.d/kubernetes.conf}
  modules_content: {description: Its text (rendered on the controller)., type: str, required: true}
  sysctls: {description: Parameter name to value., type: dict, default: {}}
  sysctl_file: {description: sysctl.d file., type: path, default: /etc/sysctl.d/99-kubernetes.conf}
  sysctl_content: {description: Its text (rendered on the controller)., type: str, required: true}
  host_owned: {description: The kernel belongs to a host (container node); failures become warnings., type: bool, default: false}
  virtualization: {description: The node's virtualisation type, named in the warnings., type: str, default: ""}
"""

RETURN = r"""
appliance_warnings: {description: What could not be applied here and why (only with host_owned); the CLI reads this key., type: list, elements: str}
swap_disabled: {description: swapoff ran., type: bool}
modules_loaded: {description: Modules loaded by this run., type: list, elements: str}
sysctls_set: {description: Parameters set by this run., type: list, elements: str}
"""

# The kernel's views (module-level so the unit tests can point them at a temporary tree).
PROC_SWAPS = "/proc/swaps"
PROC_SYS = "/proc/sys"
SYS_MODULE = "/sys/module"
MODULES_BUILTIN = f"/lib/modules/{platform.release()}/modules.builtin"

SWAP_LINE = re.compile(r"^([^#\s][^\n]*\sswap\s[^\n]*)$", re.M)
SWAP_MARK = "  # disabled by appliance (kubelet needs swap off)"


def fstab_without_swap(text: str) -> str:
    """fstab text with every active swap line commented out (and marked as ours)."""
    return SWAP_LINE.sub(lambda m: "# " + m.group(1) + SWAP_MARK, text)


def swap_active(proc_swaps: str) -> bool:
    """/proc/swaps has a header line, then one line per active device."""
    return len(proc_swaps.strip().splitlines()) > 1


def module_active(name: str) -> bool:
    """Loaded (/sys/module/NAME) or built into the running kernel (modules.builtin)."""
    if os.path.isdir(os.path.join(SYS_MODULE, name)):
        return True
    text = read_text(MODULES_BUILTIN) or ""
    return re.search(r"/" + re.escape(name) + r"\.ko(\.[a-z]+)?$", text, re.M) is not None


def sysctl_path(key: str) -> str:
    """net.ipv4.ip_forward -> /proc/sys/net/ipv4/ip_forward (sysctl also takes the slash form)."""
    return os.path.join(PROC_SYS, key.replace(".", "/") if "/" not in key else key)


def sysctl_live(key: str) -> str | None:
    """The live value with whitespace normalised (multi-value parameters use tabs), or None."""
    try:
        with open(sysctl_path(key), encoding="utf-8") as f:
            return " ".join(f.read().split())
    except OSError:
        return None


def sysctl_writable(key: str) -> bool:
    """False on a read-only /proc/sys (a container's): how check mode predicts a refusal."""
    return os.access(sysctl_path(key), os.W_OK)


def wanted(value: Any) -> str:
    return " ".join(str(value).split())


def converge(module: Any) -> dict[str, Any]:
    p, check = module.params, module.check_mode
    where = f"this {p['virtualization'] or 'container'} node"
    limits: list[str] = []
    diffs: list[dict[str, Any]] = []
    result: dict[str, Any] = {"swap_disabled": False, "modules_loaded": [], "sysctls_set": []}

    def refuse(what: str, limit: str) -> None:
        if not p["host_owned"]:
            module.fail_json(msg=what, appliance_warnings=limits)
        limits.append(limit)

    if p["swap_off"]:
        if swap_active(read_text(PROC_SWAPS) or ""):
            if not check:
                rc, _out, err = module.run_command(["swapoff", "-a"])
                if rc != 0:
                    module.fail_json(msg=f"swapoff -a failed: {err.strip()}")
            result["swap_disabled"] = True
        fstab = read_text(p["fstab"])
        if fstab is not None:
            d = converge_file(
                p["fstab"], fstab_without_swap(fstab), os.stat(p["fstab"]).st_mode & 0o7777, check
            )
            diffs += [d] if d else []

    d = converge_file(p["modules_file"], p["modules_content"], 0o644, check)
    diffs += [d] if d else []
    for name in p["modules"]:
        if module_active(name):
            continue
        rc, _out, err = (0, "", "") if check else module.run_command(["modprobe", name])
        if rc == 0:
            result["modules_loaded"].append(name)
        else:
            refuse(
                f"modprobe {name} failed: {err.strip()}",
                f"kernel module {name} could not be loaded in {where}: {err.strip()} "
                "(it must be loaded or built into the host kernel)",
            )

    d = converge_file(p["sysctl_file"], p["sysctl_content"], 0o644, check)
    diffs += [d] if d else []
    for key, value in p["sysctls"].items():
        live = sysctl_live(key)
        if live == wanted(value):
            continue
        if check:  # predict: a read-only /proc/sys (a container's) refuses the write
            rc, err = (0, "") if sysctl_writable(key) else (1, f"{sysctl_path(key)}: read-only")
        else:
            rc, _out, err = module.run_command(["sysctl", "-w", f"{key}={value}"])
        if rc == 0:
            result["sysctls_set"].append(f"{key}={value}")
        else:
            refuse(
                f"sysctl {key}={value} could not be set: {err.strip()}",
                f"sysctl {key}={value} cannot be set in {where} ({err.strip()}); "
                f"live value is {live if live is not None else '?'}: set it on the host",
            )

    acted = result["swap_disabled"] or result["modules_loaded"] or result["sysctls_set"]
    return {**result, "changed": bool(diffs or acted), "diff": diffs, "appliance_warnings": limits}


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={
            "swap_off": {"type": "bool", "default": True},
            "fstab": {"type": "path", "default": "/etc/fstab"},
            "modules": {"type": "list", "elements": "str", "default": []},
            "modules_file": {"type": "path", "default": "/etc/modules-load.d/kubernetes.conf"},
            "modules_content": {"type": "str", "required": True},
            "sysctls": {"type": "dict", "default": {}},
            "sysctl_file": {"type": "path", "default": "/etc/sysctl.d/99-kubernetes.conf"},
            "sysctl_content": {"type": "str", "required": True},
            "host_owned": {"type": "bool", "default": False},
            "virtualization": {"type": "str", "default": ""},
        },
        supports_check_mode=True,
    )
    try:
        module.exit_json(**converge(module))
    except OSError as exc:
        module.fail_json(msg=f"kernel prerequisites: {exc}")


if __name__ == "__main__":
    main()
