"""roles/etcd_restore/library/secrets_unpacked.py: a backup's secrets.tar (as cluster_backup's
`tar --create -C / etc/kubernetes/pki etc/appliance -C WORK helm-values` makes it) put back under a
root; anything a backup does not hold refused whole, with nothing written."""

from __future__ import annotations

import io
import os
import stat
import subprocess
import tarfile
from pathlib import Path

import pytest

from tests._support.modules import load_role_module

su = load_role_module("etcd_restore", "secrets_unpacked")
PATHS, SKIP = ["etc/kubernetes/pki", "etc/appliance"], ["helm-values"]


def _backup_tar(tmp: Path) -> Path:
    """The archive as the role makes it, from a master's tree under tmp/master."""
    src = tmp / "master"
    files = {
        "etc/kubernetes/pki/ca.key": (b"CA KEY", 0o600),
        "etc/kubernetes/pki/ca.crt": (b"CA CRT", 0o644),
        "etc/kubernetes/pki/etcd/ca.key": (b"ETCD CA KEY", 0o600),
        "etc/appliance/pki/registry-ca.key": (b"REGISTRY CA KEY", 0o600),
        "etc/appliance/registry-auth/appliance.password": (b"pull-secret", 0o640),
    }
    for rel, (data, mode) in files.items():
        p = src / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
        p.chmod(mode)
    (src / "etc/appliance").chmod(0o700)
    work = tmp / "work"
    (work / "helm-values").mkdir(parents=True)
    (work / "helm-values/runai.yaml").write_text("password: x\n")
    out = tmp / "secrets.tar"
    subprocess.run(["tar", "--create", "--file", str(out), "-C", str(src), "etc/kubernetes/pki",
                    "etc/appliance", "-C", str(work), "helm-values"], check=True)  # fmt: skip
    return out


def _tree(root: Path) -> dict[str, tuple[bytes, int]]:
    return {
        str(p.relative_to(root)): (p.read_bytes(), stat.S_IMODE(p.stat().st_mode))
        for p in root.rglob("*")
        if p.is_file()
    }


def test_a_backup_archive_is_put_back_as_it_was_and_a_second_run_changes_nothing(tmp_path: Path) -> None:
    tar = _backup_tar(tmp_path)
    dest = tmp_path / "fresh"
    dest.mkdir()
    dry = su.converge(str(tar), str(dest), PATHS, SKIP, check=True)
    assert dry["changed"] and len(dry["written"]) == 5 and not any(dest.iterdir())  # check mode: nothing
    first = su.converge(str(tar), str(dest), PATHS, SKIP, check=False)
    assert first["changed"] and first["files"] == 5
    assert _tree(dest) == _tree(tmp_path / "master")  # contents and modes; helm-values left out
    assert stat.S_IMODE((dest / "etc/appliance").stat().st_mode) == 0o700
    assert not (dest / "helm-values").exists()
    again = su.converge(str(tar), str(dest), PATHS, SKIP, check=False)
    assert again == {"changed": False, "written": [], "files": 5}
    (dest / "etc/kubernetes/pki/ca.key").write_bytes(b"another CA")  # drift is put right
    assert su.converge(str(tar), str(dest), PATHS, SKIP, check=False)["written"] == [
        str(dest / "etc/kubernetes/pki/ca.key")
    ]


def _with(tar: Path, info: tarfile.TarInfo, data: bytes = b"x") -> None:
    with tarfile.open(tar, "a") as t:
        if info.isfile():
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
        else:
            t.addfile(info)


def _member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.linkname = kind, 0o644, link
    return info


@pytest.mark.parametrize(
    ("member", "message"),
    [
        (_member("etc/cron.d/appliance"), "member 'etc/cron.d/appliance' is outside etc/kubernetes/pki and etc/appliance"),
        (_member("etc/appliance/../../root/.ssh/authorized_keys"), "is not a plain relative name"),
        (_member("/etc/appliance/x"), "member '/etc/appliance/x' is not a plain relative name"),
        (_member("etc/appliance/runai", tarfile.SYMTYPE, "/etc/shadow"), "member 'etc/appliance/runai' is not a regular file or a directory"),
        (_member("etc/appliance/pki/ca.key", tarfile.LNKTYPE, "etc/shadow"), "is not a regular file or a directory"),
        (_member("etc/appliance/null", tarfile.CHRTYPE), "is not a regular file or a directory"),
        (_member("etc/appliance/a\nb"), "is not a plain relative name"),
    ],
)  # fmt: skip
def test_what_a_backup_does_not_hold_is_refused_with_nothing_written(
    tmp_path: Path, member: tarfile.TarInfo, message: str
) -> None:
    tar = _backup_tar(tmp_path)
    _with(tar, member)
    dest = tmp_path / "fresh"
    dest.mkdir()
    with pytest.raises(su.ArchiveError, match=message.replace("(", r"\(").replace(".", r"\.")):
        su.converge(str(tar), str(dest), PATHS, SKIP, check=False)
    assert not any(dest.iterdir())


def test_a_symlinked_directory_on_the_master_is_not_written_through(tmp_path: Path) -> None:
    tar = _backup_tar(tmp_path)
    dest, elsewhere = tmp_path / "fresh", tmp_path / "elsewhere"
    (dest / "etc").mkdir(parents=True)
    elsewhere.mkdir()
    os.symlink(elsewhere, dest / "etc/appliance")
    with pytest.raises(su.ArchiveError, match="etc/appliance on the master is a symlink"):
        su.converge(str(tar), str(dest), PATHS, SKIP, check=False)
    assert not any(elsewhere.iterdir()) and not (dest / "etc/kubernetes").exists()  # nothing, not even pki


def test_an_archive_without_a_secret_is_refused(tmp_path: Path) -> None:
    tar = tmp_path / "empty.tar"
    with tarfile.open(tar, "w") as t:
        t.addfile(_member("helm-values", tarfile.DIRTYPE))
    with pytest.raises(su.ArchiveError, match="it holds no file under etc/kubernetes/pki or etc/appliance"):
        su.converge(str(tar), str(tmp_path), PATHS, SKIP, check=False)
