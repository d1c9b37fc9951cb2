"""NVIDIA's XML schema for `nvidia-smi -q -x`, as the 550 driver carries it, for the GPU probe
fixtures' test (tests/unit/test_nvsmi.py): the driver major the bundle pins (550.90.07).

nvidia-smi prints its DTD with `--dtd`; the binary holds it as one string beginning
`<!-- nvsmi_device_v12.dtd -->`. No GPU machine is needed to read it: Debian ships the 550
nvidia-smi in trixie's non-free (nvidia-graphics-drivers 550.163.01-2), fetched here from
deb.debian.org by its pinned sha256, unpacked with dpkg-deb, and the DTD cut out of the binary.
Written under build/nvidia (never committed: NVIDIA's file, read, not redistributed):
nvsmi_device_v12.dtd and nvidia-smi (the binary, not executable, for the --query-gpu field names).
Run by scripts/bootstrap.sh; a second run with both files present does nothing."""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
from pathlib import Path

DEB = "nvidia-smi_550.163.01-2_amd64.deb"
URL = f"http://deb.debian.org/debian/pool/non-free/n/nvidia-graphics-drivers/{DEB}"
SHA256 = "547978bd189284911beace21d83834866026e4d5b2026d8bcb74f6cd147c8be9"
BINARY = "./usr/lib/nvidia/current/nvidia-smi"
MARK = b"<!-- nvsmi_device_v12.dtd -->"
OUT = Path(__file__).resolve().parents[1] / "build" / "nvidia"


def _write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def main() -> int:
    dtd, binary = OUT / "nvsmi_device_v12.dtd", OUT / "nvidia-smi"
    if dtd.is_file() and binary.is_file():
        return 0
    OUT.mkdir(parents=True, exist_ok=True)
    print(f"bootstrap: NVIDIA's nvsmi_device_v12.dtd from Debian's {DEB} (for the GPU probe fixtures)")
    with urllib.request.urlopen(URL, timeout=120) as r:  # a pinned http URL: its sha256 is checked below
        deb = r.read()
    got = hashlib.sha256(deb).hexdigest()
    if got != SHA256:
        print(f"error: {URL}: sha256 {got}, pinned {SHA256}", file=sys.stderr)
        return 4
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / DEB).write_bytes(deb)
        tar = subprocess.run(
            ["dpkg-deb", "--fsys-tarfile", str(Path(tmp) / DEB)], capture_output=True, check=True
        )
    with tarfile.open(fileobj=io.BytesIO(tar.stdout)) as t:
        member = t.extractfile(BINARY)
        if member is None:
            print(f"error: {DEB} holds no {BINARY}", file=sys.stderr)
            return 4
        data = member.read()
    start = data.find(MARK)
    if start < 0:
        print(f"error: {BINARY} in {DEB} holds no {MARK.decode()}", file=sys.stderr)
        return 4
    _write(dtd, data[start : data.index(b"\0", start)] + b"\n")
    _write(binary, data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
