"""Files replaced whole (appliance_cli.fsutil.atomic_write and its users: the kubeconfig
`--out`, bundle files): a fresh temporary file, never a name someone placed beforehand; the
requested mode; fsync before the rename; nothing left behind on failure (issue 28)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from appliance_cli.bundle import model
from appliance_cli.cli.cluster_cmd import write_private
from appliance_cli.errors import UsageError


def _trap(target: Path, tmp_name: str) -> Path:
    """A victim file, and a symlink to it at the temporary name the old code used."""
    victim = target.parent / "victim"
    victim.write_text("precious\n")
    victim.chmod(0o644)
    (target.parent / tmp_name).symlink_to(victim)
    return victim


def test_write_private_never_writes_through_a_planted_tmp_link(tmp_path: Path) -> None:
    out = tmp_path / "admin.conf"
    victim = _trap(out, "admin.conf.tmp")
    write_private(out, "secret-key\n")
    assert victim.read_text() == "precious\n" and stat.S_IMODE(victim.stat().st_mode) == 0o644
    assert not out.is_symlink() and out.read_text() == "secret-key\n"
    assert stat.S_IMODE(out.stat().st_mode) == 0o600


def test_write_private_is_0600_from_creation_and_fsynced(tmp_path: Path, monkeypatch) -> None:
    out = tmp_path / "admin.conf"
    seen: list[tuple[int, str]] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode):
            seen.append((stat.S_IMODE(st.st_mode), Path(f"/proc/self/fd/{fd}").read_text()))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    write_private(out, "secret-key\n")
    assert seen == [(0o600, "secret-key\n")]  # the bytes were on disk, and private, before the rename
    assert out.read_text() == "secret-key\n"


def test_write_private_refuses_in_one_line_naming_the_file(tmp_path: Path) -> None:
    out = tmp_path / "missing-dir" / "admin.conf"
    with pytest.raises(UsageError, match=r"--out .*missing-dir/admin.conf: cannot write"):
        write_private(out, "x")


def test_bundle_atomic_write_never_writes_through_a_planted_tmp_link(tmp_path: Path) -> None:
    target = tmp_path / "manifest.json"
    victim = _trap(target, ".manifest.json.tmp")
    model.atomic_write(target, b"{}\n")
    assert victim.read_text() == "precious\n"
    assert not target.is_symlink() and target.read_bytes() == b"{}\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == [".manifest.json.tmp"]


def test_bundle_atomic_write_mode_is_exact_whatever_the_umask(tmp_path: Path) -> None:
    target = tmp_path / "install-toolkit.sh"
    old = os.umask(0o077)
    try:
        model.atomic_write(target, b"#!/bin/sh\n", mode=0o755)
    finally:
        os.umask(old)
    assert stat.S_IMODE(target.stat().st_mode) == 0o755 and target.read_bytes() == b"#!/bin/sh\n"


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path: Path, monkeypatch) -> None:
    out = tmp_path / "admin.conf"
    out.write_text("old")

    def full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(UsageError, match=r"admin\.conf: cannot write: No space left on device"):
        write_private(out, "new")
    assert out.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["admin.conf"]


def test_lab_state_and_rendered_inventory_never_write_through_a_planted_tmp_link(tmp_path: Path) -> None:
    from appliance_cli.core import inventory
    from appliance_cli.lab.state import LabState

    state = tmp_path / "state.json"
    victim = _trap(state, "state.json.tmp")
    LabState(name="lab", count=1).save(state)
    hosts = tmp_path / "hosts.yml"
    (tmp_path / "hosts.yml.tmp").symlink_to(victim)
    inventory.write_if_changed(hosts, "all: {}\n")
    assert victim.read_text() == "precious\n"
    assert '"name": "lab"' in state.read_text() and hosts.read_text() == "all: {}\n"


def test_atomic_stream_replaces_the_file_whole_or_not_at_all(tmp_path: Path) -> None:
    """The streamed variant (a tarball, a download): the old file stays until the block ends
    well; an exception inside leaves it and no temporary file."""
    from appliance_cli.fsutil import atomic_stream

    target = tmp_path / "support.tar.gz"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError), atomic_stream(target, 0o600) as f:
        f.write(b"half")
        raise RuntimeError("interrupted")
    assert target.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["support.tar.gz"]
    with atomic_stream(target, 0o600) as f:
        f.write(b"new ")
        f.write(b"bytes")
        assert target.read_bytes() == b"old"
    assert target.read_bytes() == b"new bytes" and target.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["support.tar.gz"]


def test_atomic_path_gives_a_tool_a_name_of_its_own(tmp_path: Path) -> None:
    """For a tool that writes by name: the name keeps the target's (mmdebstrap reads the format
    from .tar.zst), in a private directory; renamed in when the block ends well, gone otherwise."""
    from appliance_cli.fsutil import atomic_path

    target = tmp_path / "base.tar.zst"
    with atomic_path(target) as part:
        assert part.name == "base.tar.zst" and part.parent != tmp_path and not part.exists()
        assert part.parent.stat().st_mode & 0o777 == 0o700
        part.write_bytes(b"rootfs")
    assert target.read_bytes() == b"rootfs" and [p.name for p in tmp_path.iterdir()] == ["base.tar.zst"]
    with pytest.raises(RuntimeError), atomic_path(target) as part:
        part.write_bytes(b"half")
        raise RuntimeError("mmdebstrap failed")
    with pytest.raises(FileNotFoundError), atomic_path(target):
        pass  # the tool wrote nothing
    assert target.read_bytes() == b"rootfs" and [p.name for p in tmp_path.iterdir()] == ["base.tar.zst"]
