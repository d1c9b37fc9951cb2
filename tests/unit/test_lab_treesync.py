"""appliance_cli/lab/treesync.py: a node's tree brought back to a snapshot's by replacing only what
changed since the last whole copy. Whatever was done to the tree, the result must be exactly what
`cp -a` of the snapshot gives: every entry's type, mode, owner, size, mtime, content, link target,
xattrs, and which names share an inode. Checked against a real `cp -a`, on real files."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import stat
import subprocess
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from appliance_cli.lab import treesync


def _tree(root: Path) -> tuple[dict[str, tuple], list[list[str]]]:
    """Every entry's attributes that a copy must keep, and the groups of names sharing an inode."""
    entries: dict[str, tuple] = {}
    inodes: dict[int, list[str]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            s = os.lstat(p)
            kind = stat.S_IFMT(s.st_mode)
            if stat.S_ISREG(s.st_mode):
                body = hashlib.sha256(p.read_bytes()).hexdigest()
                inodes.setdefault(s.st_ino, []).append(rel)
                times = s.st_mtime_ns
            elif stat.S_ISLNK(s.st_mode):
                body, times = os.readlink(p), None
            else:
                body, times = None, s.st_mtime_ns
            xattrs = tuple(
                sorted(
                    (k, os.getxattr(p, k, follow_symlinks=False))
                    for k in os.listxattr(p, follow_symlinks=False)
                )
            )
            entries[rel] = (kind, stat.S_IMODE(s.st_mode), s.st_uid, s.st_gid, s.st_size if stat.S_ISREG(s.st_mode) else None, times, body, xattrs)  # fmt: skip
    groups = sorted(sorted(g) for g in inodes.values() if len(g) > 1)
    return entries, groups


def _snapshot(tmp: Path) -> Path:
    """A small node tree: nested directories, modes and owners, a symlink, a multiply-linked
    file (a bundle blob and its served name), an xattr, an empty file."""
    src = tmp / "snap"
    for d in (
        "etc/containerd",
        "var/lib/etcd/member",
        "srv/bundle/blobs",
        "srv/www/charts",
        "usr/bin",
        "empty",
    ):
        (src / d).mkdir(parents=True)
    (src / "etc/containerd/config.toml").write_text("version = 2\n")
    (src / "etc/containerd/config.toml").chmod(0o600)
    (src / "etc/hostname").write_text("master1\n")
    (src / "var/lib/etcd/member/db").write_bytes(b"\0" * 4096)
    os.chown(src / "var/lib/etcd/member", 4242, 4242)
    blob = src / "srv/bundle/blobs/9f86d081"
    blob.write_bytes(b"chart bytes" * 100)
    os.link(blob, src / "srv/www/charts/hami-2.4.1.tgz")
    os.link(blob, src / "srv/www/charts/hami-latest.tgz")
    (src / "usr/bin/kubectl").write_bytes(b"\x7fELF")
    (src / "usr/bin/kubectl").chmod(0o755)
    os.setxattr(src / "usr/bin/kubectl", "user.appliance", b"x")
    (src / "usr/bin/k").symlink_to("kubectl")
    (src / "etc/empty.conf").write_text("")
    return src


def _copied(src: Path, dst: Path) -> int:
    """`cp -a` as the whole restore copies, then the mark: its ctime is when the copy ended."""
    subprocess.run(["cp", "-a", "--", str(src), str(dst)], check=True)
    mark = dst.parent / f".{dst.name}.mark"
    mark.write_text("")
    return mark.stat().st_ctime_ns


def _sync(src: Path, dst: Path, since: int, log: Path) -> treesync.SyncPlan:
    p = treesync.plan(src, dst, since)
    treesync.apply(src, dst, p, log)
    return p


def _flip_keep_mtime(p: Path) -> None:
    """One byte changed in place, size and mtime put back: bit rot as test_faults makes it."""
    s = p.stat()
    data = bytearray(p.read_bytes())
    data[len(data) // 2] ^= 0xFF
    with open(p, "r+b") as f:
        f.write(data)
    os.utime(p, ns=(s.st_atime_ns, s.st_mtime_ns))


# what a test module, a boot or a fault can do to a node's tree
MUTATIONS = {
    "rewrite": lambda d: (d / "etc/hostname").write_text("worker9\n"),
    "flip_keep_mtime": lambda d: _flip_keep_mtime(d / "var/lib/etcd/member/db"),
    "flip_linked_blob": lambda d: _flip_keep_mtime(d / "srv/bundle/blobs/9f86d081"),
    "rename_over_one_link": lambda d: (
        (d / "srv/www/charts/new").write_bytes(b"chart bytes" * 100),
        os.replace(d / "srv/www/charts/new", d / "srv/www/charts/hami-2.4.1.tgz"),
    ),
    "chmod": lambda d: (d / "etc/containerd/config.toml").chmod(0o644),
    "chown_dir": lambda d: os.chown(d / "var/lib/etcd/member", 0, 0),
    "chmod_dir": lambda d: (d / "srv/www").chmod(0o700),
    "delete_file": lambda d: (d / "usr/bin/kubectl").unlink(),
    "delete_dir": lambda d: shutil.rmtree(d / "var/lib/etcd"),
    "add_file": lambda d: (d / "etc/new.conf").write_text("new\n"),
    "add_dir": lambda d: (d / "var/lib/kubelet/pods").mkdir(parents=True),
    "file_to_dir": lambda d: ((d / "etc/hostname").unlink(), (d / "etc/hostname").mkdir()),
    "dir_to_file": lambda d: (shutil.rmtree(d / "empty"), (d / "empty").write_text("x")),
    "retarget_symlink": lambda d: ((d / "usr/bin/k").unlink(), (d / "usr/bin/k").symlink_to("/etc/shadow")),
    "xattr": lambda d: os.setxattr(d / "usr/bin/kubectl", "user.appliance", b"y"),
    "truncate": lambda d: os.truncate(d / "etc/containerd/config.toml", 0),
    "move_dir_away": lambda d: os.rename(d / "srv/bundle", d / "var/bundle-moved"),
    "link_two_files": lambda d: (
        (d / "etc/empty.conf").unlink(),
        os.link(d / "etc/hostname", d / "etc/empty.conf"),
    ),
}


def test_an_untouched_tree_needs_nothing(tmp_path):
    src = _snapshot(tmp_path)
    since = _copied(src, tmp_path / "node")
    p = treesync.plan(src, tmp_path / "node", since)
    assert (p.copy, p.remove, p.dirs) == ([], [], [])


def test_only_what_changed_is_put_back_and_the_tree_is_the_snapshots_again(tmp_path):
    src = _snapshot(tmp_path)
    dst = tmp_path / "node"
    since = _copied(src, dst)
    (dst / "etc/hostname").write_text("worker9\n")
    _flip_keep_mtime(dst / "var/lib/etcd/member/db")
    (dst / "var/log").mkdir(parents=True)
    p = _sync(src, dst, since, tmp_path / "log")
    assert sorted(p.copy) == ["etc/hostname", "var/lib/etcd/member/db"]
    assert sorted(p.remove) == ["etc/hostname", "var/lib/etcd/member/db", "var/log"]
    assert _tree(dst) == _tree(src)


def test_one_name_of_a_linked_blob_replaced_puts_every_name_back_linked(tmp_path):
    src = _snapshot(tmp_path)
    dst = tmp_path / "node"
    since = _copied(src, dst)
    MUTATIONS["rename_over_one_link"](dst)
    p = _sync(src, dst, since, tmp_path / "log")
    assert sorted(p.copy) == ["srv/bundle/blobs/9f86d081", "srv/www/charts/hami-2.4.1.tgz", "srv/www/charts/hami-latest.tgz"]  # fmt: skip
    assert _tree(dst) == _tree(src)
    blob = dst / "srv/bundle/blobs/9f86d081"
    assert blob.stat().st_nlink == 3 and blob.samefile(dst / "srv/www/charts/hami-2.4.1.tgz")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(sorted(MUTATIONS)), unique=True, max_size=6))
def test_whatever_was_done_the_result_is_what_a_whole_copy_gives(tmp_path_factory, mutations):
    tmp = tmp_path_factory.mktemp("sync")
    src = _snapshot(tmp)
    dst = tmp / "node"
    since = _copied(src, dst)
    for m in mutations:
        with contextlib.suppress(OSError):  # one an earlier one made impossible (its file is gone)
            MUTATIONS[m](dst)
    _sync(src, dst, since, tmp / "log")
    assert _tree(dst) == _tree(src), mutations


def _marked_lab(tmp: Path) -> tuple[object, Path, dict]:
    from appliance_cli.lab import snapshot
    from appliance_cli.lab.layout import LabLayout
    from appliance_cli.lab.node import marker

    layout = LabLayout(name="t", dir=tmp / "lab", cache_dir=tmp / "cache")
    snap = snapshot.path(layout, "t", "k1")
    info = {"nodes": ["master1", "worker1"], "nonce": "0123abcd"}
    for n in info["nodes"]:
        (layout.nodes_dir / n).mkdir(parents=True)
        marker(layout, n).write_text("")
    snapshot._mark(layout, snap, info["nonce"], info["nodes"])
    return layout, snap, info


def test_the_mark_is_used_only_for_the_same_snapshot_instance_and_complete_nodes(tmp_path):
    from appliance_cli.lab import snapshot
    from appliance_cli.lab.node import marker

    layout, snap, info = _marked_lab(tmp_path)
    since = snapshot._marked_since(layout, snap, info)
    assert since == (layout.nodes_dir / snapshot.RESTORED).stat().st_ctime_ns
    assert snapshot._marked_since(layout, snap, info | {"nonce": "ffff0000"}) is None  # saved again
    assert snapshot._marked_since(layout, snap, info | {"nonce": None}) is None  # saved before nonces
    assert snapshot._marked_since(layout, snap.with_name("t-k2"), info) is None  # another snapshot
    assert snapshot._marked_since(layout, snap, info | {"nodes": ["master1"]}) is None
    marker(layout, "worker1").unlink()  # a node's tree left incomplete
    assert snapshot._marked_since(layout, snap, info) is None
    (layout.nodes_dir / snapshot.RESTORED).write_text("not json")
    assert snapshot._marked_since(layout, snap, info) is None


def test_a_sync_removes_what_the_snapshot_does_not_have_in_the_nodes_directory(tmp_path, monkeypatch):
    from appliance_cli.lab import snapshot
    from appliance_cli.lab.node import marker

    layout, _snap, info = _marked_lab(tmp_path)
    (layout.nodes_dir / "worker2").mkdir()  # a node added since (node add)
    marker(layout, "worker2").write_text("")
    synced: list[str] = []
    monkeypatch.setattr(snapshot, "_sync_node", lambda s, d, since, log: synced.append(d.name) or 0)
    assert snapshot._sync_lab(tmp_path / "snapnodes", layout, info["nodes"], 1, tmp_path / "log") == 0
    assert sorted(synced) == ["master1", "worker1"]
    assert sorted(p.name for p in layout.nodes_dir.iterdir()) == sorted(
        [
            "master1",
            "worker1",
            marker(layout, "master1").name,
            marker(layout, "worker1").name,
        ]
    )  # the mark too: restore writes it anew


def test_past_max_changes_a_node_is_copied_whole(tmp_path, monkeypatch):
    from appliance_cli.lab import snapshot

    src = _snapshot(tmp_path)
    dst = tmp_path / "node"
    since = _copied(src, dst)
    MUTATIONS["rewrite"](dst)
    MUTATIONS["add_file"](dst)
    monkeypatch.setattr(treesync, "MAX_CHANGES", 2)  # 3 entries changed: hostname out and in, new.conf out
    applied: list[object] = []
    monkeypatch.setattr(treesync, "apply", lambda *a: applied.append(a))
    assert snapshot._sync_node(src, dst, since, tmp_path / "log") == 3
    assert applied == [] and _tree(dst) == _tree(src)
