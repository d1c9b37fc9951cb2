#!/usr/bin/env python3
"""What the master's copy step (bundle_sync) costs when the bundle is already there, on a real
bundle (default: the lab bundle the e2e tests build): the size-only check it had before (the
module as committed at REV, default `main`), the check it has now (a blob's bytes are trusted
while its size, mtime and inode match the record made when it was hashed), and the same with
the record lost (every blob hashed once, as on the first run after the upgrade). Each run is
timed with the page cache dropped when /proc/sys/vm/drop_caches is writable (else warm, and it
says so); bytes read are the kernel's count (/proc/self/io rchar). Not a test.

usage: bench_sync_recheck.py [--bundle DIR] [--rev main] [--rounds 3]"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench_stick_copy import drop_caches, rchar  # noqa: E402  (bench/: the script's own directory)

from tests._support.modules import load_file, load_role_module  # noqa: E402

MODULE = "roles/bundle_repo/library/bundle_sync.py"


def timed(
    fn: Callable[[], object], rounds: int, before: Callable[[], None] = lambda: None
) -> tuple[float, int]:
    """Median seconds and bytes read of `rounds` runs of fn, `before` run untimed ahead of each."""
    secs, reads = [], []
    for _ in range(rounds):
        before()
        cold = drop_caches()
        r0, t0 = rchar(), time.perf_counter()
        fn()
        secs.append(time.perf_counter() - t0)
        reads.append(rchar() - r0)
    timed.cold = cold  # type: ignore[attr-defined]
    return statistics.median(secs), int(statistics.median(reads))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bundle", default="/var/lib/appliance/e2e-misc/bundle")
    ap.add_argument("--rev", default="main", help="git revision of the size-only module")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    src = Path(a.bundle)
    blobs = sorted((src / "blobs/sha256").iterdir())
    size = sum(p.stat().st_size for p in blobs)
    new = load_role_module("bundle_repo", "bundle_sync")
    with tempfile.TemporaryDirectory(prefix="bench-sync-") as tmp:
        old_path = Path(tmp) / "bundle_sync_old.py"
        old_path.write_text(subprocess.run(["git", "-C", str(ROOT), "show", f"{a.rev}:{MODULE}"],
                                           capture_output=True, text=True, check=True).stdout)  # fmt: skip
        old = load_file("bench_bundle_sync_old", old_path)
        dest = Path(tmp) / "master"
        new.sync(str(src), str(dest), fsync=False)  # the copy already there
        record = dest / new.VERIFIED
        size_only = timed(lambda: old.sync(str(src), str(dest), fsync=False), a.rounds)
        stamped = timed(lambda: new.sync(str(src), str(dest), fsync=False), a.rounds)
        keep = record.read_bytes()
        lost = timed(lambda: new.sync(str(src), str(dest), fsync=False), a.rounds, lambda: record.unlink())
        record.write_bytes(keep)
    cache = "cold cache" if getattr(timed, "cold", False) else "WARM cache (drop_caches not writable)"
    print(f"bundle {src}: {len(blobs)} blobs, {size / 2**20:.1f} MiB; re-run over a complete copy, "
          f"median of {a.rounds}, {cache}")  # fmt: skip
    base = size_only[0]
    for name, (s, r) in (("size only (" + a.rev + ")", size_only), ("size + recorded stamp (now)", stamped),
                         ("record lost: every blob hashed", lost)):  # fmt: skip
        print(f"  {name:34s} {s * 1000:9.1f} ms  {r / 2**20:8.1f} MiB read  x{s / base:6.2f} of size-only")
    return 0


if __name__ == "__main__":
    sys.exit(main())
