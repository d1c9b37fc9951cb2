"""module_utils/node_files.py: the one way the roles' node-side code writes a file that matters
(helm_release's values, tar_unpacked's plugins and record, registry_htpasswd, resumable_state,
bundle_view's and bundle_sync's records, converge_file's configuration files): a fresh temporary
file with its final mode and owner before a byte is written, fsync'd, renamed over the target,
then the directory fsync'd; nothing left behind when it fails."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from tests._support.modules import ROOT, load_module_utils

load_module_utils()
nf = sys.modules["ansible.module_utils.node_files"]

# every node-side writer of a file that matters goes through node_files (registry_seed aside: it
# writes blobs under one syncfs barrier per phase, tested in its own module)
WRITERS = [
    "roles/helm/library/helm_release.py",
    "roles/kube_binaries/library/tar_unpacked.py",
    "roles/registry/library/registry_htpasswd.py",
    "roles/bundle_repo/library/bundle_view.py",
    "roles/bundle_repo/library/bundle_sync.py",
    "module_utils/resumable_state.py",
]


def _record_syncs(monkeypatch) -> list[tuple[str, int, str]]:
    """fsync calls: ('file', mode, content) for a regular file, ('dir', 0, name) for a directory."""
    seen: list[tuple[str, int, str]] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode):
            seen.append(("file", stat.S_IMODE(st.st_mode), Path(f"/proc/self/fd/{fd}").read_text()))
        else:
            seen.append(("dir", 0, os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return seen


def test_the_bytes_are_synced_with_their_final_mode_before_the_rename_then_the_directory(
    tmp_path, monkeypatch
):
    target = tmp_path / "values.yaml"
    target.write_text("old\n")
    seen = _record_syncs(monkeypatch)
    renamed: list[tuple[str, str]] = []
    real_replace = os.replace

    def replace(src, dst):
        renamed.append((str(dst), Path(dst).read_text()))  # the target still holds the old text here
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    old_umask = os.umask(0o077)
    try:
        nf.write_atomically(str(target), b"secret: 1\n", 0o640)
    finally:
        os.umask(old_umask)
    assert seen == [("file", 0o640, "secret: 1\n"), ("dir", 0, tmp_path.name)]
    assert renamed == [(str(target), "old\n")]
    assert target.read_text() == "secret: 1\n" and stat.S_IMODE(target.stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["values.yaml"]


def test_run_as_root_the_file_is_root_and_the_given_group(tmp_path):
    target = tmp_path / "htpasswd"
    nf.write_atomically(str(target), b"u:$2y$...\n", 0o640, gid=4242)
    st = target.stat()
    # as on a node (root): root and the group; otherwise (a developer's own run) left as created
    assert (st.st_uid, st.st_gid) == ((0, 4242) if os.geteuid() == 0 else (os.geteuid(), os.getegid()))


def test_a_failed_write_leaves_the_old_file_and_no_temporary_file(tmp_path, monkeypatch):
    target = tmp_path / "state.json"
    target.write_text("{}\n")

    def full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError, match="No space left"):
        nf.write_atomically(str(target), b'{"schema": 1}\n', 0o600)
    assert target.read_text() == "{}\n"
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]


def test_many_files_into_one_directory_sync_it_once(tmp_path, monkeypatch):
    seen = _record_syncs(monkeypatch)
    for name in ("bridge", "loopback"):
        nf.write_atomically(str(tmp_path / name), b"\x7fELF", 0o755, sync_dir=False)
    nf.sync_directory(str(tmp_path))
    assert [kind for kind, _, _ in seen] == ["file", "file", "dir"]


def test_converge_file_rewrites_on_another_mode_or_owner_and_not_otherwise(tmp_path, monkeypatch):
    target = tmp_path / "k8s.conf"
    assert nf.converge_file(str(target), "a=1\n", 0o644) is not None
    assert nf.converge_file(str(target), "a=1\n", 0o644) is None
    target.chmod(0o666)
    assert nf.converge_file(str(target), "a=1\n", 0o644, check_mode=True) is not None
    assert stat.S_IMODE(target.stat().st_mode) == 0o666  # check mode wrote nothing
    assert nf.converge_file(str(target), "a=1\n", 0o644) is not None
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    if os.geteuid() == 0:
        os.chown(target, 0, 4242)
        assert nf.converge_file(str(target), "a=1\n", 0o644)["after"] == "a=1\n"
        assert (target.stat().st_uid, target.stat().st_gid) == (0, 0)


def test_a_file_that_is_not_utf8_is_converged_and_its_diff_can_be_printed(tmp_path):
    """A damaged or foreign file (here one Latin-1 byte) is rewritten like any other that differs,
    not a traceback; the diff it returns shows the byte as U+FFFD, so it travels as JSON."""
    target = tmp_path / "k8s.conf"
    target.write_bytes(b"caf\xe9=1\n")
    diff = nf.converge_file(str(target), "a=1\n", 0o644)
    assert target.read_bytes() == b"a=1\n"
    assert diff["before"] == "caf\ufffd=1\n"
    json.dumps(diff, ensure_ascii=False).encode("utf-8")  # would raise on a lone surrogate
    assert nf.converge_file(str(target), "a=1\n", 0o644) is None


def test_text_read_and_written_back_keeps_the_bytes_that_are_not_utf8(tmp_path):
    """An edit of a file with a byte that is not UTF-8 elsewhere in it (os_prereqs comments out the
    swap line of an fstab) changes the edited line and leaves every other byte as it was."""
    fstab = tmp_path / "fstab"
    fstab.write_bytes(b"# disque syst\xe8me\nUUID=1 / ext4 defaults 0 1\n/swap.img none swap sw 0 0\n")
    text = nf.read_text(str(fstab))
    assert nf.converge_file(str(fstab), text, 0o644) is None  # read, unchanged: nothing written
    nf.converge_file(str(fstab), text.replace("/swap.img", "# /swap.img"), 0o644)
    assert (
        fstab.read_bytes()
        == b"# disque syst\xe8me\nUUID=1 / ext4 defaults 0 1\n# /swap.img none swap sw 0 0\n"
    )


@pytest.mark.parametrize("path", WRITERS)
def test_the_node_side_writers_use_node_files_and_no_mkstemp_of_their_own(path):
    text = (ROOT / path).read_text()
    assert "from ansible.module_utils.node_files import" in text
    assert "import tempfile" not in text and "mkstemp(" not in text
