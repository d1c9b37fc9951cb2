#!/usr/bin/env python3
"""Throughput of `bundle verify` vs `sha256sum` vs a bare parallel hashlib loop, side by side over
the same files (random blobs in a temp dir, page cache warm for all three). Prints ratios; not a test.

usage: bench_bundle_verify.py [--gib 1.0] [--jobs N] [--rounds 3]"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from appliance_cli.bundle import verify_bundle
from appliance_cli.bundle.model import Artifact, FileEntry, Manifest, atomic_write


def make_bundle(root: Path, total: int) -> list[Path]:
    """Blobs of mixed sizes (1-64 MiB), like layers and .debs, plus a manifest over them."""
    blob_dir = root / "blobs/sha256"
    blob_dir.mkdir(parents=True)
    sizes, left, i = [], total, 0
    pattern = [64, 1, 8, 32, 2, 16, 4, 48]
    while left > 0:
        s = min(left, pattern[i % len(pattern)] * 1024 * 1024)
        sizes.append(s)
        left -= s
        i += 1
    files, entries = [], []
    for n, s in enumerate(sizes):
        data = os.urandom(s)
        d = hashlib.sha256(data).hexdigest()
        (blob_dir / d).write_bytes(data)
        files.append(blob_dir / d)
        entries.append(FileEntry(path=f"f{n}", digest=f"sha256:{d}", size=s))
    art = Artifact(name="bench", kind="file", size=total, digest=entries[0].digest, files=entries)
    m = Manifest(profile="bench", created="now", tool_version="bench", chunk_size=2**31, artifacts=[art])
    atomic_write(root / "manifest.json", m.to_json())
    return files


def bare_hashlib(files: list[Path], jobs: int) -> None:
    def one(p: Path) -> str:
        h = hashlib.sha256()
        with open(p, "rb", buffering=0) as f:
            while b := f.read(4 << 20):
                h.update(b)
        return h.hexdigest()

    with ThreadPoolExecutor(jobs) as pool:
        list(pool.map(one, files))


def timed(fn, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    total = int(a.gib * 1024**3)
    with tempfile.TemporaryDirectory(prefix="bench-verify-") as tmp:
        root = Path(tmp)
        files = make_bundle(root, total)
        names = [str(p) for p in files]
        subprocess.run(["cat", *names], stdout=subprocess.DEVNULL, check=True)  # warm the page cache
        t_sum = timed(
            lambda: subprocess.run(["sha256sum", *names], stdout=subprocess.DEVNULL, check=True), a.rounds
        )
        t_bare = timed(lambda: bare_hashlib(files, a.jobs), a.rounds)
        t_ver = timed(lambda: verify_bundle(root, jobs=a.jobs), a.rounds)
        t_ver1 = timed(lambda: verify_bundle(root, jobs=1), a.rounds)
    mib = total / 1024**2
    print(
        f"{len(files)} blobs, {mib:.0f} MiB, {os.cpu_count()} CPUs, jobs={a.jobs}, best of {a.rounds} (warm cache)"
    )
    print(f"  sha256sum (coreutils, 1 process)  {mib / t_sum:8.0f} MiB/s")
    print(f"  bare hashlib thread pool          {mib / t_bare:8.0f} MiB/s")
    print(f"  bundle verify --jobs 1            {mib / t_ver1:8.0f} MiB/s")
    print(f"  bundle verify --jobs {a.jobs:<2}           {mib / t_ver:8.0f} MiB/s")
    print(f"verify / sha256sum     = {t_sum / t_ver:.2f}x  (goal >= 5x)")
    print(f"verify / bare hashlib  = {t_bare / t_ver:.2f}x  (goal >= 0.8x)")
    print(f"verify jobs={a.jobs} / jobs=1 = {t_ver1 / t_ver:.2f}x  (parallel gain)")


if __name__ == "__main__":
    main()
