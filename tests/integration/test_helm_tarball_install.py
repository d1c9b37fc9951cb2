"""The helm role's production path, run by Ansible against localhost: the upstream release tarball
(linux-amd64/helm inside, as get.helm.sh publishes it) downloaded over loopback HTTP, checked
against the bundle's sha256, unpacked and installed; a re-run changes nothing; a tarball holding
another helm release is refused naming what it reports. The lab only exercises the single
executable path (its helm is the stand-in), so this is where the tarball path is proven."""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

from tests._support.bundle_server import served  # noqa: F401  (served: the fixture)
from tests._support.standin_localhost import localhost_changed

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PLAYBOOK = str(BIN / "ansible-playbook") if (BIN / "ansible-playbook").exists() else "ansible-playbook"


def _tarball(version: str) -> bytes:
    """A release tarball shaped like helm-vX-linux-amd64.tar.gz: linux-amd64/{helm,LICENSE,README.md}."""
    script = f'#!/bin/sh\n[ "$1 $2" = "version --short" ] && echo "{version}+gc309b6f" && exit 0\nexit 1\n'
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data, mode in (
            ("linux-amd64/helm", script.encode(), 0o755),
            ("linux-amd64/LICENSE", b"Apache-2.0\n", 0o644),
            ("linux-amd64/README.md", b"helm\n", 0o644),
        ):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _run(tmp_path: Path, files_url: str, sha256: str) -> subprocess.CompletedProcess[str]:
    if os.geteuid() != 0:
        pytest.skip("the role installs files owned by root")
    play = [{
        "hosts": "localhost", "gather_facts": False, "connection": "local",
        "tasks": [{"ansible.builtin.include_role": {"name": "helm"}}],
    }]  # fmt: skip
    extra = {
        "appliance_files_url": files_url,
        "appliance_bundle_files": {
            "helm": {"sha256": sha256, "source_url": "https://get.helm.sh/helm-v3.14.4-linux-amd64.tar.gz"}
        },
        "appliance_bundle_charts": {},
        "appliance_kubernetes_version": "v1.23.17",
        "helm_install_dir": str(tmp_path / "bin"),
        "helm_cache_dir": str(tmp_path / "cache"),
    }
    (tmp_path / "bin").mkdir(exist_ok=True)
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    (tmp_path / "extra.yml").write_text(yaml.safe_dump(extra))
    env = os.environ | {"ANSIBLE_ROLES_PATH": str(REPO / "roles"), "ANSIBLE_NOCOLOR": "1",
                        "ANSIBLE_LOCALHOST_WARNING": "false", "ANSIBLE_INVENTORY_UNPARSED_WARNING": "false"}  # fmt: skip
    return subprocess.run(
        [PLAYBOOK, "-i", "localhost,", str(tmp_path / "play.yml"), "-e", f"@{tmp_path / 'extra.yml'}"],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip


def test_the_upstream_tarball_is_unpacked_installed_and_left_alone_after(tmp_path, served):  # noqa: F811
    files, url = served
    data = _tarball("v3.14.4")
    (files / "helm").write_bytes(data)
    first = _run(tmp_path, url, hashlib.sha256(data).hexdigest())
    assert first.returncode == 0, first.stdout[-3000:]
    helm = tmp_path / "bin" / "helm"
    assert helm.is_file() and os.access(helm, os.X_OK)
    assert subprocess.run([helm, "version", "--short"], capture_output=True, text=True).stdout.startswith(
        "v3.14.4"
    )
    assert localhost_changed(first.stdout) >= 3  # cache dir, tarball, unpacked helm
    again = _run(tmp_path, url, hashlib.sha256(data).hexdigest())
    assert again.returncode == 0 and localhost_changed(again.stdout) == 0, again.stdout[-3000:]


def test_another_helm_release_is_refused_saying_what_it_reports(tmp_path, served):  # noqa: F811
    files, url = served
    data = _tarball("v3.12.0")
    (files / "helm").write_bytes(data)
    run = _run(tmp_path, url, hashlib.sha256(data).hexdigest())
    assert run.returncode != 0
    assert "helm reports 'v3.12.0+gc309b6f', expected v3.14.4" in " ".join(run.stdout.split())


def test_a_tarball_unlike_the_bundle_checksum_is_not_installed(tmp_path, served):  # noqa: F811
    files, url = served
    (files / "helm").write_bytes(_tarball("v3.14.4"))
    run = _run(tmp_path, url, "0" * 64)
    assert run.returncode != 0 and "checksum" in run.stdout.lower()
    assert not (tmp_path / "bin" / "helm").exists()
