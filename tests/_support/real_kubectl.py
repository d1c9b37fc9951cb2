"""Debian's real kubectl client (kubernetes-client, v1.20.2: the lab nodes' kubectl) for tests that
run kubectl against the stand-in API server (no tests here).

The binary comes from the Debian mirror: scripts/bootstrap.sh fetches the .deb into build/debs;
`real_kubectl()` unpacks usr/bin/kubectl from it once into build/kubernetes-client, and fails the
test, saying so, when the .deb is not there."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from debian.debfile import DebFile

REPO = Path(__file__).resolve().parents[2]
DEBS = REPO / "build" / "debs"  # scripts/bootstrap.sh fetches the .deb there
CACHE = REPO / "build" / "kubernetes-client"


def real_kubectl() -> Path:
    exe = CACHE / "kubectl"
    if exe.is_file():
        return exe
    CACHE.mkdir(parents=True, exist_ok=True)
    debs = sorted(DEBS.glob("kubernetes-client_*.deb"))
    if not debs:
        pytest.fail(f"Debian's kubernetes-client .deb is not in {DEBS}: scripts/bootstrap.sh fetches it")
    data = DebFile(str(debs[-1])).data.tgz()
    member = data.extractfile("./usr/bin/kubectl")
    assert member is not None
    part = exe.with_suffix(f".part{id(data)}")
    part.write_bytes(member.read())
    part.chmod(0o755)
    part.rename(exe)
    return exe


def run_kubectl(
    kubeconfig: Path, *args: str, stdin: str | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """`kubectl --kubeconfig=KUBECONFIG ARGS`, its discovery cache beside the kubeconfig (one per
    stand-in cluster: a server started later on the same port must not read an older one's)."""
    cache = kubeconfig.parent / "kubectl-cache"
    argv = [str(real_kubectl()), f"--kubeconfig={kubeconfig}", f"--cache-dir={cache}", *args]
    return subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=timeout, check=False)
