#!/usr/bin/env python3
"""Stick -> master: the install's verified copy (gate + bundle_sync, one pass) vs a raw `cp -r` +
`sync` of the same bytes vs the previous two-pass path (full re-hash at the gate, then the
copy), side by side on the same generated bundle. The page cache is dropped before every run
when /proc/sys/vm/drop_caches is writable (else the figures are warm-cache, and it says so);
bytes read are the kernel's count (/proc/self/io rchar, `cp` as a child: its own). Not a test.

usage: bench_stick_copy.py [--gib 1.0] [--rounds 2]"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_bundle_verify import make_bundle

from appliance_cli.bundle import verify_bundle
from tests._support.modules import load_role_module

sync = load_role_module("bundle_repo", "bundle_sync").sync


def rchar() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    return 0


def drop_caches() -> bool:
    try:
        subprocess.run(["sync"], check=True)
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def raw_cp(src: Path, dst: Path) -> int:
    subprocess.run(["cp", "-r", str(src), str(dst)], check=True)
    subprocess.run(["sync"], check=True)
    return -1  # cp's reads are its own process's


def one_pass(src: Path, dst: Path) -> int:
    before = rchar()
    verify_bundle(src, hash_blobs=False)  # the gate: signature, manifest, sizes
    sync(str(src), str(dst), fsync=True)  # the master's copy: hashed while copied
    return rchar() - before


def two_pass(src: Path, dst: Path) -> int:
    before = rchar()
    verify_bundle(src)  # the gate as it was: every blob re-hashed
    sync(str(src), str(dst), fsync=True)
    return rchar() - before


def run(fn, src: Path, work: Path, rounds: int) -> tuple[float, int]:
    best, read = float("inf"), 0
    for _ in range(rounds):
        dst = work / "master"
        shutil.rmtree(dst, ignore_errors=True)
        drop_caches()
        t0 = time.perf_counter()
        read = fn(src, dst)
        best = min(best, time.perf_counter() - t0)
    shutil.rmtree(work / "master", ignore_errors=True)
    return best, read


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
        src = Path(tmp) / "stick"
        make_bundle(src, int(a.gib * 1024**3))
        size = sum(p.stat().st_size for p in (src / "blobs/sha256").iterdir())
        cold = drop_caches()
        print(f"bundle: {size / 2**20:.0f} MiB of blobs on {tmp} ({os.cpu_count()} CPUs); "
              f"page cache {'dropped before each run' if cold else 'NOT dropped (not root): warm-cache figures'}")  # fmt: skip
        rows = [("raw cp -r + sync (no verification)", raw_cp), ("install: gate + verified copy (one pass)", one_pass),
                ("before: full re-hash, then copy (two passes)", two_pass)]  # fmt: skip
        results = [(name, *run(fn, src, Path(tmp), a.rounds)) for name, fn in rows]
    base = results[0][1]
    print(f"{'path':<46} {'seconds':>8} {'MiB/s':>7} {'vs raw':>7} {'stick reads':>12}")
    for name, secs, read in results:
        reads = "-" if read < 0 else f"{read / size:.2f}x"
        print(f"{name:<46} {secs:8.2f} {size / 2**20 / secs:7.0f} {secs / base:6.2f}x {reads:>12}")
    ratio = results[1][1] / base
    print(f"goal: verified copy <= 1.15x raw cp: {'met' if ratio <= 1.15 else 'NOT met'} ({ratio:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
