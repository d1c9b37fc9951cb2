"""Dispatch on basename(argv[0]): kubeadm, kubelet, kubectl, crictl, helm or etcdutl."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from .crictl import crictl_main
from .etcdutl import etcdutl_main
from .helm import helm_main
from .kubeadm_ops import kubeadm_main
from .kubectl import kubectl_main
from .kubelet import kubelet_main
from .util import VERSION, Fail


def main(argv: list[str]) -> int:
    name = os.path.basename(argv[0])
    if name.endswith(".py"):  # run as the source file: first argument names the tool
        name, argv = (argv[1], argv[1:]) if len(argv) > 1 else ("", argv)
    tools: dict[str, Callable[[list[str]], int]] = {
        "kubeadm": kubeadm_main, "kubelet": kubelet_main, "kubectl": kubectl_main, "crictl": crictl_main,
        "helm": helm_main, "etcdutl": etcdutl_main,
    }  # fmt: skip
    if name not in tools:
        sys.stderr.write(
            "usage: python3 -m k8s_standin {kubeadm|kubelet|kubectl|crictl|helm|etcdutl} ...  (or install under those names)\n"
        )
        return 2
    if name == "kubelet" and "--version" in argv[1:]:
        print(f"Kubernetes {VERSION}")
        return 0
    try:
        return tools[name](argv[1:])
    except Fail as e:
        sys.stderr.write(e.message + "\n")
        return e.code
    except BrokenPipeError:
        return 1
