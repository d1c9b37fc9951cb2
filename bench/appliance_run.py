"""What the day-2 benches share (not a bench itself: `make bench` runs bench_*.py only)."""

from __future__ import annotations

import subprocess
import sys
import time


def run(label: str, *args: str) -> float:
    """`appliance ARGS` -> wall seconds; prints one line; stops the bench on a failure (the lab
    of $APPLIANCE_LAB_NAME taken down first)."""
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "appliance_cli", *args], capture_output=True, text=True)
    dt = time.monotonic() - t0
    if r.returncode != 0:
        print(f"{label}: FAILED rc={r.returncode}\n{r.stdout[-1500:]}\n{r.stderr[-1500:]}", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "appliance_cli", "lab", "down", "--purge"], capture_output=True)
        sys.exit(1)
    print(f"{label:<46} {dt:7.1f} s", flush=True)
    return dt
