"""`files: from_deb` (lab only): a directory of a Debian package packed like an upstream release
tarball. Real .deb files made with dpkg-deb, real tar/gzip on the way back."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tarfile
import time
from pathlib import Path

import pytest
import yaml

from appliance_cli.bundle.profile import load_profile
from appliance_cli.debian.debdir import extract_file, find_deb, pack_deb_dir
from appliance_cli.errors import BundleError

pytestmark = pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="needs dpkg-deb to make a .deb")


def make_deb(tmp: Path, name: str = "cni-demo", version: str = "1.0-1") -> Path:
    root = tmp / f"{name}-{version}-tree"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN/control").write_text(
        f"Package: {name}\nVersion: {version}\nArchitecture: amd64\nMaintainer: t <t@example.org>\n"
        "Description: test package\n"
    )
    plugins = root / "usr/lib/cni"
    (plugins / "sub").mkdir(parents=True)
    for plugin, body in (("bridge", b"\x7fELF bridge"), ("loopback", b"\x7fELF loopback")):
        (plugins / plugin).write_bytes(body)
        (plugins / plugin).chmod(0o755)
    (plugins / "sub/nested").write_text("not at the top level")  # a subdirectory is not packed
    (plugins / "link").symlink_to("bridge")  # nor a link
    (root / "usr/share/doc").mkdir(parents=True)
    (root / "usr/share/doc/README").write_text("elsewhere")
    deb = tmp / "repo" / f"{name}_{version}_amd64.deb"
    deb.parent.mkdir(exist_ok=True)
    subprocess.run(
        ["dpkg-deb", "--root-owner-group", "-Zxz", "--build", str(root), str(deb)],
        check=True,
        capture_output=True,
    )
    return deb


def test_packs_the_directory_like_a_release_tarball(tmp_path: Path) -> None:
    deb = make_deb(tmp_path)
    out = tmp_path / "cni.tgz"
    assert pack_deb_dir(deb, "usr/lib/cni", out, "files/cni") == 2
    with tarfile.open(out, "r:gz") as tar:
        members = tar.getmembers()
        assert [m.name for m in members] == ["./bridge", "./loopback"]
        assert all(m.isfile() and m.mode == 0o755 and m.uid == 0 and m.uname == "root" for m in members)
        assert tar.extractfile("./bridge").read() == b"\x7fELF bridge"
    # GNU tar reads it the way the unarchive module will on the node
    listed = subprocess.run(["tar", "tzf", str(out)], check=True, capture_output=True, text=True).stdout
    assert listed.split() == ["./bridge", "./loopback"]


def test_same_package_same_bytes(tmp_path: Path, monkeypatch) -> None:
    """Reproducible: an incremental bundle build finds the blob it already has (packed later,
    the clock has moved on: nothing of it may end up in the bytes)."""
    deb = make_deb(tmp_path)
    a, b = tmp_path / "a.tgz", tmp_path / "b.tgz"
    pack_deb_dir(deb, "usr/lib/cni", a, "x")
    later = time.time() + 86400
    monkeypatch.setattr(time, "time", lambda: later)
    pack_deb_dir(deb, "usr/lib/cni/", b, "x")
    assert hashlib.sha256(a.read_bytes()).digest() == hashlib.sha256(b.read_bytes()).digest()


def test_a_directory_without_files_is_named(tmp_path: Path) -> None:
    deb = make_deb(tmp_path)
    out = tmp_path / "x.tgz"
    with pytest.raises(
        BundleError, match=r"^files/cni: cni-demo_1.0-1_amd64.deb has no files under /usr/lib/nothing$"
    ):
        pack_deb_dir(deb, "usr/lib/nothing", out, "files/cni")
    assert not out.exists()


def test_a_broken_package_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "repo/cni-demo_1.0-1_amd64.deb"
    bad.parent.mkdir()
    bad.write_bytes(b"!<arch>\nnot really")
    with pytest.raises(BundleError, match=r"^files/cni: cannot repack cni-demo_1.0-1_amd64.deb: "):
        pack_deb_dir(bad, "usr/lib/cni", tmp_path / "x.tgz", "files/cni")


def test_one_file_as_the_package_has_it(tmp_path: Path) -> None:
    """`from_deb: {file}` (the lab's kubectl): the member's bytes, nothing else; a missing one named."""
    deb = make_deb(tmp_path)
    out = tmp_path / "bridge"
    extract_file(deb, "usr/lib/cni/bridge", out, "file/kubectl")
    assert out.read_bytes() == b"\x7fELF bridge"
    with pytest.raises(
        BundleError, match=r"^file/kubectl: cni-demo_1.0-1_amd64.deb has no file /usr/bin/kubectl$"
    ):
        extract_file(deb, "usr/bin/kubectl", tmp_path / "k", "file/kubectl")
    with pytest.raises(BundleError, match=r"has no file /usr/lib/cni/link$"):  # a link is not a file
        extract_file(deb, "usr/lib/cni/link", tmp_path / "k", "file/kubectl")
    assert not (tmp_path / "k").exists()


def test_find_deb_names_a_missing_or_ambiguous_package(tmp_path: Path) -> None:
    deb = make_deb(tmp_path)
    assert find_deb([tmp_path / "repo", tmp_path / "other"], "cni-demo", "files/cni") == deb
    with pytest.raises(
        BundleError, match=r"files/cni: package cni-plugins is not in this profile's apt closure"
    ) as ei:
        find_deb([tmp_path / "repo"], "cni-plugins", "files/cni")
    assert "packages of an apt entry" in (ei.value.hint or "")
    make_deb(tmp_path, version="2.0-1")
    with pytest.raises(
        BundleError, match=r"package cni-demo is there 2 times \(cni-demo_1.0-1_amd64.deb, cni-demo_2"
    ):
        find_deb([tmp_path / "repo"], "cni-demo", "files/cni")


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            {"from_deb": {"package": "pkg", "path": "usr/lib/cni"}, "filename": "p.tgz"},
            "a tarball repacked from a Debian package is a test stand-in: set test_only: true",
        ),
        (
            {"from_deb": {"package": "pkg", "path": "usr/lib/cni"}, "test_only": True},
            "from_deb needs the filename of the tarball it makes",
        ),
        (
            {
                "from_deb": {"package": "pkg", "path": "usr/lib/cni"},
                "url": "https://h/p.tgz",
                "sha256": "0" * 64,
                "filename": "p.tgz",
                "test_only": True,
            },
            "give exactly one of url, source or from_deb",
        ),
        (
            {"from_deb": {"package": "pkg", "path": "usr/lib/cni", "file": "usr/bin/x"}, "test_only": True},
            "give exactly one of path \\(a directory, packed\\) or file",
        ),
        (
            {
                "source": "tests/standin/k8s_standin",
                "version": "v1.20.2",
                "kubernetes": "v1.23.17",
                "sha256": "0" * 64,
            },
            "a tool whose version differs from the Kubernetes release it is bundled for is a test stand-in",
        ),
    ],
)
def test_profile_rules_for_from_deb(tmp_path: Path, entry: dict, message: str) -> None:
    p = tmp_path / "p.yml"
    p.write_text(yaml.safe_dump({"name": "p", "files": [{"name": "cni", **entry}]}))
    with pytest.raises(BundleError, match=rf"files/cni(\.from_deb)?: Value error, {message}"):
        load_profile(p)
