"""Wall times of the foundation: lab up (fresh and cached), first install, no-op re-run.

Prints figures; asserts nothing (benchmarks are not tests). Needs root. Uses its own lab name
so it never touches a lab the user has up.  usage: python bench/bench_foundation.py [--nodes 4] [--skip-fresh]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

os.environ["APPLIANCE_LAB_NAME"] = os.environ.get("APPLIANCE_BENCH_LAB", "bench")
os.environ["CI"] = "1"


def timed(label: str, *args: str, env: dict | None = None) -> float:
    t0 = time.monotonic()
    r = subprocess.run(
        [sys.executable, "-m", "appliance_cli", *args],
        capture_output=True,
        text=True,
        env=os.environ | (env or {}),
    )
    dt = time.monotonic() - t0
    if r.returncode != 0:
        print(f"{label}: FAILED rc={r.returncode}\n{r.stderr[-2000:]}", file=sys.stderr)
        sys.exit(1)
    changed = [ln for ln in r.stdout.splitlines() if ln.startswith("RECAP")]
    total = sum(int(ln.split("changed=")[1].split()[0]) for ln in changed)
    print(f"{label:<34} {dt:7.1f} s" + (f"   changed={total}" if changed else ""), flush=True)
    return dt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--skip-fresh", action="store_true", help="do not rebuild the cached base rootfs")
    a = ap.parse_args()
    n = str(a.nodes)
    print(f"bench_foundation: {a.nodes} nodes, lab '{os.environ['APPLIANCE_LAB_NAME']}'")
    try:
        if not a.skip_fresh:
            timed(f"lab up --nodes {n} (fresh rootfs)", "lab", "up", "--nodes", n, "--rebuild")
            timed("lab down --purge", "lab", "down", "--purge")
        timed(f"lab up --nodes {n} (cached)", "lab", "up", "--nodes", n)
        first = timed("install (first run)", "install", "--site", "lab")
        rerun = timed("install (no-op re-run)", "install", "--site", "lab")
        print(f"{'re-run / first run':<34} {rerun / first:7.2f}x")
    finally:
        timed("lab down --purge", "lab", "down", "--purge")


if __name__ == "__main__":
    main()
