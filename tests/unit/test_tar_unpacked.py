"""kube_binaries' tar_unpacked module (roles/kube_binaries/library/tar_unpacked.py): the CNI plugins
tarball unpacked into a directory, a re-run that only hashes what it unpacked, drift repaired, and
an archive holding anything but plain files refused before a byte is written."""

from __future__ import annotations

import hashlib
import io
import json
import stat
import tarfile
from pathlib import Path
from typing import Any

import pytest

from tests._support import modules
from tests._support.modules import ModuleFailed, load_role_module

tu = load_role_module("kube_binaries", "tar_unpacked")


def _tarball(path: Path, files: dict[str, bytes], extra: list[tarfile.TarInfo] = ()) -> str:
    """A gzip'd tarball laid out as the upstream release is: a `./` entry, then `./NAME` files."""
    with tarfile.open(path, "w:gz") as t:
        top = tarfile.TarInfo("./")
        top.type, top.mode = tarfile.DIRTYPE, 0o755
        t.addfile(top)
        for name, data in files.items():
            info = tarfile.TarInfo(f"./{name}")
            info.size, info.mode, info.uid, info.gid = (
                len(data),
                0o755 if name != "LICENSE" else 0o644,
                1001,
                1001,
            )
            t.addfile(info, io.BytesIO(data))
        for info in extra:
            t.addfile(info, io.BytesIO(b"") if info.isfile() else None)
    return hashlib.sha256(path.read_bytes()).hexdigest()


def fake_module(tmp: Path, digest: str, check: bool = False) -> modules.FakeModule:
    params: dict[str, Any] = {"src": str(tmp / "cni.tgz"), "src_sha256": digest, "dest": str(tmp / "bin"),
                              "record": str(tmp / "cni.tgz.unpacked.json")}  # fmt: skip
    return modules.FakeModule(params, check_mode=check)


PLUGINS = {
    "bridge": b"\x7fELF bridge",
    "host-local": b"\x7fELF host-local",
    "loopback": b"\x7fELF lo",
    "LICENSE": b"Apache",
}


@pytest.fixture
def lab(tmp_path):
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "flannel").write_bytes(b"not the tarball's")  # another component's plugin
    return tmp_path, _tarball(tmp_path / "cni.tgz", PLUGINS)


def test_first_run_unpacks_root_owned_with_the_members_modes_and_keeps_a_record(lab):
    tmp, digest = lab
    result = tu.converge(fake_module(tmp, digest))
    assert result["changed"] and result["unpacked"] == sorted(PLUGINS)
    assert result["reason"] == "no record of this tarball unpacked here"
    for name, data in PLUGINS.items():
        f = tmp / "bin" / name
        assert f.read_bytes() == data and (f.stat().st_uid, f.stat().st_gid) == (0, 0)
        assert stat.S_IMODE(f.stat().st_mode) == (0o644 if name == "LICENSE" else 0o755)
    record = json.loads((tmp / "cni.tgz.unpacked.json").read_text())
    assert record["src_sha256"] == digest
    assert record["files"]["bridge"] == hashlib.sha256(PLUGINS["bridge"]).hexdigest()
    assert (tmp / "bin" / "flannel").read_bytes() == b"not the tarball's"
    assert sorted(p.name for p in (tmp / "bin").iterdir()) == sorted([*PLUGINS, "flannel"]), (
        "temporary files left"
    )


def test_a_re_run_changes_nothing(lab):
    tmp, digest = lab
    tu.converge(fake_module(tmp, digest))
    assert tu.converge(fake_module(tmp, digest)) == {"changed": False, "unpacked": [], "reason": ""}


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda d: (d / "host-local").unlink(), "host-local is missing"),
        (lambda d: (d / "bridge").write_bytes(b"tampered"), "bridge differs from the tarball's"),
    ],
)
def test_drift_is_repaired(lab, damage, reason):
    tmp, digest = lab
    tu.converge(fake_module(tmp, digest))
    damage(tmp / "bin")
    result = tu.converge(fake_module(tmp, digest))
    assert result["changed"] and result["reason"] == reason
    assert (tmp / "bin" / "bridge").read_bytes() == PLUGINS["bridge"]
    assert (tmp / "bin" / "host-local").read_bytes() == PLUGINS["host-local"]
    assert not tu.converge(fake_module(tmp, digest))["changed"]


def test_another_tarball_unpacks_again(lab):
    tmp, digest = lab
    tu.converge(fake_module(tmp, digest))
    new = _tarball(tmp / "cni.tgz", {**PLUGINS, "bridge": b"\x7fELF bridge v2"})
    result = tu.converge(fake_module(tmp, new))
    assert result["changed"] and (tmp / "bin" / "bridge").read_bytes() == b"\x7fELF bridge v2"


def test_check_mode_writes_nothing_and_names_what_it_would_unpack(lab):
    tmp, digest = lab
    result = tu.converge(fake_module(tmp, digest, check=True))
    assert result["changed"] and result["unpacked"] == list(PLUGINS)
    assert sorted(p.name for p in (tmp / "bin").iterdir()) == ["flannel"]
    assert not (tmp / "cni.tgz.unpacked.json").exists()


def _member(name: str, kind: bytes = tarfile.REGTYPE, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, linkname
    return info


@pytest.mark.parametrize(
    ("member", "words"),
    [
        (_member("../evil"), "is not a plain file name"),
        (_member("./sub/x"), "is not a plain file name"),
        (_member("./link", tarfile.SYMTYPE, "/etc/shadow"), "is not a regular file"),
        (_member("./dev", tarfile.CHRTYPE), "is not a regular file"),
        (_member("./sub", tarfile.DIRTYPE), "is not a regular file"),
    ],
)
def test_an_archive_with_anything_but_plain_files_is_refused_before_a_write(tmp_path, member, words):
    (tmp_path / "bin").mkdir()
    digest = _tarball(tmp_path / "cni.tgz", PLUGINS, [member])
    with pytest.raises(tu.ArchiveError, match=words):
        tu.converge(fake_module(tmp_path, digest))
    assert list((tmp_path / "bin").iterdir()) == [] and not (tmp_path / "evil").exists()


def test_a_digest_that_is_not_sha256_fails_naming_it(lab):
    tmp, _ = lab
    with pytest.raises(ModuleFailed, match="src_sha256 'abc' is not a sha256 digest"):
        tu.converge(fake_module(tmp, "abc"))
