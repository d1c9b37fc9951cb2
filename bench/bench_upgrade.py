"""Wall time of a rolling upgrade (issue 19): a lab of N nodes (default 4) installed at v1.23.16
from the old lab bundle, then `appliance upgrade apply` to the lab bundle's v1.23.17 (etcd
snapshot, kubeadm upgrade apply on the master, each worker drained, upgraded, Ready, uncordoned,
one at a time), side by side with the no-op re-run of the Kubernetes layer on the same lab at the
same moment as the baseline. No goal yet: the issue asks to measure. The ratio says what a rolling
upgrade costs against one pass over the cluster; the per-worker figure is what a bigger site adds
per node.

Prints figures; asserts nothing (benchmarks are not tests). Needs root. Its own lab name
(APPLIANCE_BENCH_LAB, default bench-upgrade) and bundle directory; it never touches a lab the user
has up.
usage: python bench/bench_upgrade.py [--nodes 4] [--keep-lab]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from appliance_run import run  # bench/ is on sys.path: the script's own directory

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: tests._support
os.environ["APPLIANCE_LAB_NAME"] = os.environ.get("APPLIANCE_BENCH_LAB", "bench-upgrade")
os.environ["CI"] = "1"
ROOT = Path(os.environ.get("APPLIANCE_BENCH_BUNDLES", "/var/lib/appliance/bench-upgrade"))
KUBERNETES = "container_runtime,kube_binaries,control_plane,node_join,node_roles,cni_flannel"
OLD = "v1.23.16"
NEW_STICK = "/srv/appliance-new-stick"


def bundles() -> tuple[Path, Path, Path, Path]:
    """(old bundle, its public key, new bundle, its public key), built incrementally and signed."""
    from appliance_cli.bundle import BuildOptions, build_bundle, keygen, sign_bundle
    from tests._support.upgrade_bundles import build_old_lab_bundle

    t0 = time.monotonic()
    new = build_bundle(BuildOptions(profile="lab", out=ROOT / "new", cache=ROOT / "build-cache")).path
    old = build_old_lab_bundle(ROOT / "old", ROOT / "build-cache", OLD)
    keys = {}
    for name, path in (("old", old), ("new", new)):
        priv = ROOT / f"{name}-key.key"
        if not priv.is_file():
            keygen(ROOT / f"{name}-key")
        sign_bundle(path, priv)
        keys[name] = ROOT / f"{name}-key.pub"
    print(f"{'bundles old + new (incremental) and signed':<46} {time.monotonic() - t0:7.1f} s", flush=True)
    return old, keys["old"], new, keys["new"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--keep-lab", action="store_true")
    a = ap.parse_args()
    n = a.nodes
    from appliance_cli.core import siteedit
    from appliance_cli.core.siteconfig import SITE_FILE
    from appliance_cli.lab.layout import LabLayout

    print(
        f"bench_upgrade: {n} nodes, lab '{os.environ['APPLIANCE_LAB_NAME']}', load {os.getloadavg()[0]:.1f}"
    )
    old, old_key, new, new_key = bundles()
    run("lab down --purge", "lab", "down", "--purge")
    run(f"lab up --nodes {n} (old bundle)", "lab", "up", "--nodes", str(n), "--bundle", str(old),
        "--bundle-key", str(old_key))  # fmt: skip
    layout = LabLayout.default()
    siteedit.set_kubernetes_version_in_file(layout.site_dir / SITE_FILE, OLD)
    run(f"install at {OLD}", "install", "--site", "lab", "--skip-diagnose")
    stick = layout.node_root("master1") / NEW_STICK.lstrip("/")
    shutil.rmtree(stick, ignore_errors=True)
    stick.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["cp", "-al", str(new), str(stick)], check=True)
    base = run("Kubernetes layer, no-op (baseline)", "install", "--site", "lab", "--tags", KUBERNETES)
    up = run(
        f"upgrade apply {OLD} -> v1.23.17 ({n} nodes)", "upgrade", "apply", "--site", "lab", "--bundle", str(new),
        "--key", str(new_key), "--master-bundle", NEW_STICK, "--yes",
    )  # fmt: skip
    if not a.keep_lab:
        run("lab down --purge", "lab", "down", "--purge")
    print()
    print(f"rolling upgrade / Kubernetes no-op   {up / base:5.2f}x   ({up:.1f} s vs {base:.1f} s)")
    if n > 1:
        print(f"per node                             {up / n:5.1f} s")


if __name__ == "__main__":
    main()
