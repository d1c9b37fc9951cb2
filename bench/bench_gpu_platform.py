"""Wall time of the GPU platform layer (helm, gpu_operator, storage_nfs when the site has NFS) on
a 4-node lab: its first run on an installed cluster and its no-op re-run, side by side with the
no-op re-run of the Kubernetes layer below it as the baseline (the same lab, the same moment), and
the controller's CPU per node for each (this process's children: ansible-runner, its workers and
Mitogen; the nodes' own work is not counted).

Prints figures; asserts nothing (benchmarks are not tests). Needs root. Its own lab name
(APPLIANCE_BENCH_LAB, default bench-gpu) and the demo's bundle directory; it never touches a lab the
user has up.
usage: python bench/bench_gpu_platform.py [--nodes 4] [--keep-lab]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

os.environ["APPLIANCE_LAB_NAME"] = os.environ.get("APPLIANCE_BENCH_LAB", "bench-gpu")
os.environ["CI"] = "1"
BUNDLES = Path(os.environ.get("APPLIANCE_BENCH_BUNDLES", "/var/lib/appliance/bundles"))
PLATFORM = "helm,gpu_operator,storage_nfs"
KUBERNETES = "container_runtime,kube_binaries,control_plane,node_join,node_roles,cni_flannel"


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run(label: str, *args: str, nodes: int = 0) -> tuple[float, int, float]:
    """`appliance ARGS` -> (wall s, things changed, controller CPU s); prints one line."""
    t0, c0 = time.monotonic(), children_cpu()
    r = subprocess.run([sys.executable, "-m", "appliance_cli", *args], capture_output=True, text=True)
    dt, cpu = time.monotonic() - t0, children_cpu() - c0
    if r.returncode != 0:
        print(f"{label}: FAILED rc={r.returncode}\n{r.stdout[-1500:]}\n{r.stderr[-1500:]}", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "appliance_cli", "lab", "down", "--purge"], capture_output=True)
        sys.exit(1)
    changed = sum(
        int(ln.split("changed=")[1].split()[0]) for ln in r.stdout.splitlines() if ln.startswith("RECAP")
    )
    per_node = f"   controller CPU {cpu:5.1f} s ({cpu / nodes:4.1f} s/node)" if nodes else ""
    print(f"{label:<46} {dt:7.1f} s   changed={changed:<3}{per_node}", flush=True)
    return dt, changed, cpu


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--keep-lab", action="store_true")
    a = ap.parse_args()
    n = a.nodes
    bundle, key = BUNDLES / "lab", BUNDLES / "lab-signing"
    BUNDLES.mkdir(parents=True, exist_ok=True)
    print(
        f"bench_gpu_platform: {n} nodes, lab '{os.environ['APPLIANCE_LAB_NAME']}', load {os.getloadavg()[0]:.1f}"
    )
    run(
        "bundle build --profile lab (incremental)",
        "bundle",
        "build",
        "--profile",
        "lab",
        "--out",
        str(bundle),
    )
    if not key.with_suffix(".key").is_file():
        run("bundle keygen", "bundle", "keygen", "--out", str(key))
    run("bundle sign", "bundle", "sign", str(bundle), "--key", str(key.with_suffix(".key")))
    run("lab down --purge", "lab", "down", "--purge")
    run(f"lab up --nodes {n}", "lab", "up", "--nodes", str(n), "--bundle", str(bundle),
        "--bundle-key", str(key.with_suffix(".pub")))  # fmt: skip
    run("install without the platform", "install", "--site", "lab", "--skip-tags", PLATFORM, nodes=n)
    k8s, _, k8s_cpu = run("Kubernetes layer, no-op (baseline)", "install", "--site", "lab", "--tags", KUBERNETES,
                          nodes=n)  # fmt: skip
    first, _, first_cpu = run(
        "GPU platform layer, first run", "install", "--site", "lab", "--tags", PLATFORM, nodes=n
    )
    noop, changed, noop_cpu = run("GPU platform layer, no-op re-run", "install", "--site", "lab", "--tags", PLATFORM,
                                  nodes=n)  # fmt: skip
    if changed:
        print(f"  note: the re-run changed {changed} things (not idempotent: not a no-op figure)")
    if not a.keep_lab:
        run("lab down --purge", "lab", "down", "--purge")
    print()
    print(f"platform first run / Kubernetes no-op   {first / k8s:5.2f}x   ({first:.1f} s vs {k8s:.1f} s)")
    print(f"platform no-op / Kubernetes no-op       {noop / k8s:5.2f}x   ({noop:.1f} s vs {k8s:.1f} s)")
    print(
        f"controller CPU per node: platform first {first_cpu / n:.1f} s, no-op {noop_cpu / n:.1f} s; "
        f"Kubernetes no-op {k8s_cpu / n:.1f} s"
    )


if __name__ == "__main__":
    main()
