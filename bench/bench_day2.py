"""Wall times of the day-2 node operations on an installed lab: drain + uncordon of one worker,
and a rejoin (kubeadm reset, a fresh join, labels, Ready) of the same worker, side by side with
the no-op re-run of the Kubernetes layer on the same lab at the same moment as the baseline. No
goal yet (issue 19 asks to measure); the ratios say how a maintenance step compares with a pass
over the cluster.

Prints figures; asserts nothing (benchmarks are not tests). Needs root. Its own lab name
(APPLIANCE_BENCH_LAB, default bench-day2) and the demo's bundle directory; it never touches a lab
the user has up.
usage: python bench/bench_day2.py [--nodes 2] [--keep-lab]
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from appliance_run import run  # bench/ is on sys.path: the script's own directory

os.environ["APPLIANCE_LAB_NAME"] = os.environ.get("APPLIANCE_BENCH_LAB", "bench-day2")
os.environ["CI"] = "1"
BUNDLES = Path(os.environ.get("APPLIANCE_BENCH_BUNDLES", "/var/lib/appliance/bundles"))
KUBERNETES = "container_runtime,kube_binaries,control_plane,node_join,node_roles,cni_flannel"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--keep-lab", action="store_true")
    a = ap.parse_args()
    n = a.nodes
    bundle, key = BUNDLES / "lab", BUNDLES / "lab-signing"
    BUNDLES.mkdir(parents=True, exist_ok=True)
    print(f"bench_day2: {n} nodes, lab '{os.environ['APPLIANCE_LAB_NAME']}', load {os.getloadavg()[0]:.1f}")
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
    run("install", "install", "--site", "lab", "--skip-diagnose")
    worker = f"worker{n - 1}"
    base = run("Kubernetes layer, no-op (baseline)", "install", "--site", "lab", "--tags", KUBERNETES)
    drain = run(f"node drain {worker}", "node", "drain", "--site", "lab", worker, "--yes")
    back = run(f"node uncordon {worker}", "node", "uncordon", "--site", "lab", worker)
    rejoin = run(f"node rejoin {worker}", "node", "rejoin", "--site", "lab", worker, "--yes")
    if not a.keep_lab:
        run("lab down --purge", "lab", "down", "--purge")
    print()
    print(
        f"drain + uncordon / Kubernetes no-op   {(drain + back) / base:5.2f}x   ({drain + back:.1f} s vs {base:.1f} s)"
    )
    print(f"rejoin / Kubernetes no-op             {rejoin / base:5.2f}x   ({rejoin:.1f} s vs {base:.1f} s)")


if __name__ == "__main__":
    main()
