#!/usr/bin/env python3
"""What one call of a stand-in tool costs, with and without the bytecode its zipapp carries.

    python bench/bench_standin_calls.py [--calls N]

A node calls the stand-in's crictl and helm dozens of times per install (images ahead, releases'
state). The packed zipapp carries checked-hash .pyc files beside its sources (bundle/zipapp.py);
the baseline is the same zipapp with the .pyc members taken out, so python3 compiles every module it
imports on every call, as it did before. Both are run here, alternating, N calls each per tool, and
the CPU time of the calls (user + sys of the children: less sensitive to a busy machine than wall
time) is printed per call with the ratio. Prints figures; asserts nothing."""

from __future__ import annotations

import argparse
import io
import resource
import subprocess
import tempfile
import time
import zipfile
from pathlib import Path

from appliance_cli.bundle import zipapp

STANDIN = Path(__file__).resolve().parents[1] / "tests" / "standin" / "k8s_standin"
# The nodes' interpreter (Debian 12's python3), when this machine has it: a pyenv python3 imports
# its site-packages' .pth hooks at every start, which would hide the difference.
PYTHON = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else "python3"
CALLS = {"crictl": ["--version"], "helm": ["version", "--short"], "kubeadm": ["version", "-o", "short"]}


def without_bytecode(data: bytes) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data[len(zipapp.SHEBANG) :])) as zin, zipfile.ZipFile(out, "w") as zout:
        for info in zin.infolist():
            if not info.filename.endswith(".pyc"):
                zout.writestr(info, zin.read(info))
    return zipapp.SHEBANG + out.getvalue()


def cost(exe: Path, args: list[str]) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one call."""
    before, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
    subprocess.run([PYTHON, str(exe), *args], check=True, capture_output=True, cwd="/", timeout=60)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, time.monotonic() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=20, help="calls per tool and variant (default 20)")
    a = ap.parse_args()
    packed = zipapp.pack(STANDIN, "bench")
    variants = {"baseline (sources only)": without_bytecode(packed), "packed (with .pyc)": packed}
    with tempfile.TemporaryDirectory() as tmp:
        print(f"interpreter: {PYTHON}")
        print(f"{'tool':8} {'variant':26} {'cpu ms/call':>12} {'wall ms/call':>13}")
        for tool, args in CALLS.items():
            exes = {}
            for i, (name, data) in enumerate(variants.items()):
                exe = Path(tmp) / str(i) / tool  # the stand-in dispatches on its file name
                exe.parent.mkdir(exist_ok=True)
                exe.write_bytes(data)
                exes[name] = exe
            totals = {name: [0.0, 0.0] for name in variants}
            for _ in range(a.calls):  # alternating: the machine's drift lands on both sides
                for name, exe in exes.items():
                    c, w = cost(exe, args)
                    totals[name][0] += c
                    totals[name][1] += w
            for name, (c, w) in totals.items():
                print(f"{tool:8} {name:26} {1000 * c / a.calls:12.1f} {1000 * w / a.calls:13.1f}")
            (bc, bw), (pc, pw) = totals.values()
            print(f"{tool:8} {'ratio packed/baseline':26} {pc / bc:12.2f} {pw / bw:13.2f}")


if __name__ == "__main__":
    main()
