"""`files: source: DIR`: a package directory (the k8s stand-in) packed as one reproducible zipapp."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from appliance_cli.bundle import zipapp
from appliance_cli.errors import BundleError
from tests._support.bundles import build

STANDIN = Path(__file__).resolve().parents[1] / "standin" / "k8s_standin"


def copy_standin(tmp: Path) -> Path:
    pkg = tmp / "src" / "k8s_standin"
    shutil.copytree(STANDIN, pkg, ignore=shutil.ignore_patterns("__pycache__"))
    return pkg


def test_same_files_same_bytes_whatever_their_mtimes(tmp_path: Path) -> None:
    pkg = copy_standin(tmp_path)
    first = zipapp.pack(pkg, "file/kubeadm")
    for p in pkg.iterdir():
        os.utime(p, (1_000_000, 1_000_000))
    (pkg / "__pycache__").mkdir()
    (pkg / "__pycache__" / "util.cpython-311.pyc").write_bytes(b"junk")
    assert zipapp.pack(pkg, "file/kubeadm") == first
    (pkg / "util.py").write_text((pkg / "util.py").read_text() + "\n# changed\n")
    assert zipapp.pack(pkg, "file/kubeadm") != first


def test_packed_file_dispatches_on_its_name(tmp_path: Path) -> None:
    data = zipapp.pack(STANDIN, "file/kubeadm")
    assert data.startswith(b"#!/usr/bin/env python3\n")
    for tool, args, want in [
        ("kubeadm", ["version", "-o", "short"], "v1.23.17"),
        ("kubelet", ["--version"], "Kubernetes v1.23.17"),
        ("crictl", ["--version"], "crictl version v1.23.0"),
    ]:
        exe = tmp_path / tool
        exe.write_bytes(data)
        exe.chmod(0o755)
        r = subprocess.run([str(exe), *args], capture_output=True, text=True, cwd="/", timeout=60)
        assert (r.returncode, r.stdout.strip()) == (0, want), r.stderr


def test_not_a_package_dir_is_named(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "x.py").write_text("")
    with pytest.raises(BundleError, match=r"file/x: .*pkg is not a package directory with a __main__.py"):
        zipapp.pack(tmp_path / "pkg", "file/x")


def test_bundle_rebuild_writes_no_new_blob(tmp_path: Path) -> None:
    pkg = copy_standin(tmp_path)
    prof = tmp_path / "p.yml"
    entry = {"version": "v1", "source": "src/k8s_standin", "mode": "0755", "test_only": True}
    prof.write_text(
        yaml.safe_dump(
            {"name": "unit", "files": [{"name": "kubeadm", **entry}, {"name": "kubectl", **entry}]}
        )
    )
    first = build(tmp_path, prof)
    assert first.blobs_written == 1  # both tools are the same bytes
    m = first.manifest
    src = {a.name: a.source for a in m.artifacts}
    assert src["kubeadm"] is not None and (src["kubeadm"].path, src["kubeadm"].packed) == (
        "src/k8s_standin",
        "zipapp",
    )
    os.utime(pkg / "util.py", (2_000_000, 2_000_000))
    second = build(tmp_path, prof)
    assert second.blobs_written == 0 and second.blobs_skipped == 2
