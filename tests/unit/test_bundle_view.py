"""bundle_view: the served-tree mapping, idempotence, stale-entry removal, the URL index."""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import pytest

from tests._support.modules import load_role_module

ROOT = Path(__file__).resolve().parents[2]
view = load_role_module("bundle_repo", "bundle_view")

FPR = "8007" + "20C3DBFFB8D827C7C394BDD587E2E4FAB8EB"[:36]
ARMORED = "-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nmDMEZ0\n-----END PGP PUBLIC KEY BLOCK-----\n"


def _d(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class Bundle:
    def __init__(self, root: Path):
        self.root = root
        (root / "blobs/sha256").mkdir(parents=True, exist_ok=True)
        self.artifacts: list[dict] = []

    def entry(self, path: str, data: bytes, chunk: int | None = None) -> dict:
        e = {"path": path, "digest": _d(data), "size": len(data)}
        parts = [data[i : i + chunk] for i in range(0, len(data), chunk)] if chunk else [data]
        for p in parts:
            (self.root / "blobs/sha256" / _d(p)[7:]).write_bytes(p)
        if chunk:
            e["chunks"] = [{"digest": _d(p), "size": len(p)} for p in parts]
        return e

    def add(self, name: str, kind: str, files: dict[str, bytes], chunk: int | None = None, **extra) -> None:
        entries = [self.entry(p, d, chunk) for p, d in files.items()]
        self.artifacts.append({"name": name, "kind": kind, "files": entries, "size": 0, **extra})

    def write(self) -> dict:
        doc = {"schema": "appliance-bundle", "artifacts": self.artifacts}
        (self.root / "manifest.json").write_text(json.dumps(doc))
        return doc


@pytest.fixture
def bundle(tmp_path: Path) -> Bundle:
    b = Bundle(tmp_path / "bundle")
    b.add("debian-bookworm", "apt-repo", {"Packages": b"P", "Packages.gz": b"G", "pool/a_1_amd64.deb": b"deb"},
          apt={"distro": "debian", "codename": "bookworm"})  # fmt: skip
    b.add("ubuntu-focal", "apt-repo", {"Packages": b"U"},
          apt={"distro": "Ubuntu", "codename": "focal", "signed_by": FPR, "keyring": ARMORED})  # fmt: skip
    b.add("kubeadm", "file", {"kubeadm": b"#!kubeadm"}, version="v1.23.17", install_path="/usr/bin/kubeadm")
    b.add("cni-plugins", "file", {"a/bridge": b"bridge", "a/loopback": b"lo"})
    b.add("gpu-operator", "helm-chart", {"gpu-operator-v24.6.2.tgz": b"tgz"}, version="v24.6.2")
    b.add("pause", "oci-image", {"blobs/sha256/x": b"m"})
    b.add("appliance_toolkit", "wheel", {"appliance_toolkit-1.0-py3-none-any.whl": b"whl"})
    b.add("big", "file", {"big.bin": b"0123456789" * 10}, chunk=32)
    b.write()
    return b


def test_mapping(bundle: Bundle):
    plan = view.plan_view(json.loads((bundle.root / "manifest.json").read_text()))
    assert sorted(plan) == [
        "apt/debian-bookworm/Packages",
        "apt/debian-bookworm/Packages.gz",
        "apt/debian-bookworm/pool/a_1_amd64.deb",
        "apt/ubuntu-focal/Packages",
        "charts/gpu-operator/gpu-operator-v24.6.2.tgz",
        "files/big",
        "files/cni-plugins/a/bridge",  # multi-file artifact: files/<name>/<path>
        "files/cni-plugins/a/loopback",
        "files/kubeadm",  # single file: files/<name>
    ]
    assert len(plan["files/big"]["parts"]) == 4


@pytest.mark.parametrize("bad", ["../etc/passwd", "/abs", "a//b", "a/./b"])
def test_unsafe_paths_are_refused(bad):
    with pytest.raises(view.ViewError, match=rf"unsafe path '{re.escape(bad)}' in the manifest"):
        view.plan_view(
            {"artifacts": [{"name": "x", "kind": "file", "files": [{"path": bad, "digest": "d", "size": 1}]}]}
        )


def test_materialise_links_copies_chunks_and_is_idempotent(bundle: Bundle, tmp_path: Path):
    www = tmp_path / "www"
    res = view.materialise(str(bundle.root), str(www), base_url="http://10.0.0.1:8081")
    assert res["changed"] and res["entries"] == 9 and res["copied"] == 1 and res["linked"] == 8
    kubeadm = www / "files/kubeadm"
    assert kubeadm.read_bytes() == b"#!kubeadm"
    assert kubeadm.stat().st_ino == (bundle.root / "blobs/sha256" / _d(b"#!kubeadm")[7:]).stat().st_ino
    assert (www / "files/big").read_bytes() == b"0123456789" * 10  # chunks joined
    assert not [p for p in www.rglob("*") if ".view-" in p.name]
    again = view.materialise(str(bundle.root), str(www))
    assert again["changed"] is False and again["written"] == 0 and again["removed"] == []


def test_copy_mode_across_filesystems(bundle: Bundle, tmp_path: Path):
    res = view.materialise(str(bundle.root), str(tmp_path / "www"), link_mode="copy")
    assert res["linked"] == 0 and res["copied"] == 9
    assert (tmp_path / "www/files/kubeadm").stat().st_nlink == 1


def test_stale_entries_it_owns_are_removed_others_kept(bundle: Bundle, tmp_path: Path):
    www = tmp_path / "www"
    view.materialise(str(bundle.root), str(www))
    (www / "apt/README.txt").write_text("the operator's own file")
    bundle.artifacts = [a for a in bundle.artifacts if a["name"] not in ("ubuntu-focal", "cni-plugins")]
    bundle.write()
    res = view.materialise(str(bundle.root), str(www))
    assert res["changed"] and res["removed"] == [
        "apt/ubuntu-focal/Packages",
        "files/cni-plugins/a/bridge",
        "files/cni-plugins/a/loopback",
    ]
    assert not (www / "apt/ubuntu-focal").exists() and not (www / "files/cni-plugins").exists()
    assert (www / "apt/README.txt").exists() and (www / "files/kubeadm").exists()
    assert view.materialise(str(bundle.root), str(www))["changed"] is False


def test_changed_content_under_the_same_path_is_replaced(bundle: Bundle, tmp_path: Path):
    www = tmp_path / "www"
    view.materialise(str(bundle.root), str(www))
    bundle.artifacts = [a for a in bundle.artifacts if a["name"] != "kubeadm"]
    bundle.add("kubeadm", "file", {"kubeadm": b"#!kubeadm-2"})
    bundle.write()
    res = view.materialise(str(bundle.root), str(www))
    assert res["written"] == 1 and (www / "files/kubeadm").read_bytes() == b"#!kubeadm-2"


def test_a_blob_copied_again_is_linked_again(bundle: Bundle, tmp_path: Path):
    """A corrupt blob removed from the bundle copy and copied again by Sync: the served hard link
    still holds the old inode (the corrupt bytes) and must follow the new blob."""
    www = tmp_path / "www"
    view.materialise(str(bundle.root), str(www))
    blob = bundle.root / "blobs/sha256" / _d(b"tgz")[7:]
    served = www / "charts/gpu-operator/gpu-operator-v24.6.2.tgz"
    with open(blob, "r+b") as f:  # rot in place: every link to it sees it, size unchanged
        f.write(b"TGZ")
    assert served.read_bytes() == b"TGZ"
    blob.unlink()
    blob.write_bytes(b"tgz")  # Sync's fresh copy, a new inode
    res = view.materialise(str(bundle.root), str(www))
    assert res["changed"] and res["written"] == 1 and res["linked"] == 1
    assert served.read_bytes() == b"tgz" and served.stat().st_ino == blob.stat().st_ino
    assert view.materialise(str(bundle.root), str(www))["changed"] is False


def test_check_mode_writes_nothing(bundle: Bundle, tmp_path: Path):
    res = view.materialise(str(bundle.root), str(tmp_path / "www"), check_mode=True)
    assert res["changed"] and not os.path.exists(tmp_path / "www")


def test_index_for_the_other_roles(bundle: Bundle):
    idx = view.served_index(json.loads((bundle.root / "manifest.json").read_text()), "http://10.0.0.1:8081/")
    assert idx["apt_repos"][1] == {
        "name": "ubuntu-focal",
        "distro": "ubuntu",  # lower-cased: matched against ansible_facts.distribution | lower
        "codename": "focal",
        "arch": "amd64",
        "url": "http://10.0.0.1:8081/apt/ubuntu-focal/",
        # the key apt reads the repository with comes from the signed manifest, not from :8081
        "signed_by": FPR,
        "keyring": ARMORED,
    }
    assert idx["apt_repos"][0]["keyring"] == ""  # an unsigned repository: bundle_repo's facts refuse it
    k = idx["files"]["kubeadm"]
    assert k["sha256"] == _d(b"#!kubeadm")[7:] and k["url"] == "http://10.0.0.1:8081/files/kubeadm"
    assert k["install_path"] == "/usr/bin/kubeadm" and k["version"] == "v1.23.17"
    assert idx["files"]["cni-plugins"]["url"].endswith("/files/cni-plugins/")
    members = idx["files"]["cni-plugins"]["members"]  # a tree: each member's sha256 (runai-adm)
    assert len(members) > 1 and all(len(h) == 64 for h in members.values())
    assert "members" not in k
    assert (
        idx["charts"]["gpu-operator"]["url"]
        == "http://10.0.0.1:8081/charts/gpu-operator/gpu-operator-v24.6.2.tgz"
    )
    assert "pause" not in idx["files"]
