"""Dispatch on basename(argv[0]): kubeadm, kubelet, crictl, helm or flannel (the CNI plugin). (No kubectl: the lab's is
Debian's real client; no etcd, etcdctl or etcdutl: the lab's etcd image carries the real ones,
tests/standin/README.md.)"""

from __future__ import annotations

import importlib
import os
import sys

from .util import VERSION, Fail

# tool -> (module, function): only the called tool's module is imported, as each real tool is its
# own binary (a node calls crictl and helm dozens of times per install).
TOOLS = {
    "kubeadm": ("kubeadm_ops", "kubeadm_main"), "kubelet": ("kubelet", "kubelet_main"),
    "crictl": ("crictl", "crictl_main"), "helm": ("helm", "helm_main"),
}  # fmt: skip


def main(argv: list[str]) -> int:
    name = os.path.basename(argv[0])
    if name.endswith(".py"):  # run as the source file: first argument names the tool
        name, argv = (argv[1], argv[1:]) if len(argv) > 1 else ("", argv)
    if name not in TOOLS:
        sys.stderr.write(
            "usage: python3 -m k8s_standin {kubeadm|kubelet|crictl|helm|flannel} ...  (or install under those names)\n"
        )
        return 2
    if name == "kubelet" and "--version" in argv[1:]:
        print(f"Kubernetes {VERSION}")
        return 0
    module, function = TOOLS[name]
    tool = getattr(importlib.import_module(f".{module}", __package__), function)
    try:
        return tool(argv[1:])
    except Fail as e:
        sys.stderr.write(e.message + "\n")
        return e.code
    except BrokenPipeError:
        return 1
