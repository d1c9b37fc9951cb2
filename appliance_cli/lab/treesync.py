"""A node's root filesystem brought back to a snapshot's copy by replacing only what changed.

`cp -a SNAPSHOT NODE` of a whole root takes 10 to 30 s for a lab's nodes on this ext4 host (no
reflinks), and a test module that only read the cluster changed a few dozen files (journal,
wtmp, etcd's database). So once a restore has copied a snapshot whole, it records when that copy
ended (the ctime of a mark file, written right after it, on the kernel's own clock), and the next
restore of the same snapshot replaces only the entries of the node's tree that

* have a ctime at or after that mark: every write, truncate, chmod, chown, rename, link, unlink
  or xattr change updates an inode's ctime, and user space cannot set it back;
* differ from the snapshot in type, mode, owner, size, mtime or device number;
* are missing from the node's tree (copied back), or are not in the snapshot (removed).

Hard links are kept as the snapshot has them: when one name of a multiply-linked file is
replaced, every name of it is, in the same `cp -a` call (which links what it copies together). The
copies themselves are `cp -a --parents`, so ownership, permissions, timestamps and xattrs (file
capabilities included) are exactly what the full copy gives. Directories that stay get the
snapshot's mode, owner and times back.

The nodes are stopped while this runs (restore stops them first). It is only used when the mark
names the same snapshot instance (its nonce): a snapshot saved again under the same name, a mark
from an interrupted restore (removed before any change), or anything else unknown means the
whole copy, as before."""

from __future__ import annotations

import os
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path

from appliance_cli.errors import LabError
from appliance_cli.proc import run

# More changed entries than this in one node's tree: the whole copy (one cp call must hold them
# all, and past this many the whole copy costs little more).
MAX_CHANGES = 5000
# Every copy of a snapshot's files, whole or in part: cp dies with this process (setpriv
# --pdeathsig), so a save or restore killed with -9 leaves no cp writing on into a copy that the
# next save removes as abandoned (the kill -9 drill found one).
CP_A = ("setpriv", "--pdeathsig", "KILL", "--", "cp", "-a")


@dataclass
class SyncPlan:
    """What differs between a snapshot's tree and a node's: relative paths."""

    remove: list[str] = field(default_factory=list)  # in the node's tree only, or to be replaced
    copy: list[str] = field(default_factory=list)  # from the snapshot (a directory: its whole subtree)
    dirs: list[str] = field(default_factory=list)  # kept, with the snapshot's attributes put back


def _same_inode_attrs(s: os.stat_result, d: os.stat_result) -> bool:
    return (s.st_mode, s.st_uid, s.st_gid) == (d.st_mode, d.st_uid, d.st_gid)


def _unchanged(s: os.stat_result, d: os.stat_result, since_ns: int) -> bool:
    """A non-directory entry of the node's tree that still is the snapshot's."""
    if d.st_ctime_ns >= since_ns or not _same_inode_attrs(s, d):
        return False
    if stat.S_ISCHR(s.st_mode) or stat.S_ISBLK(s.st_mode):
        return s.st_rdev == d.st_rdev
    return (s.st_size, s.st_mtime_ns) == (d.st_size, d.st_mtime_ns)


def _entries(path: str) -> dict[str, os.DirEntry[str]]:
    with os.scandir(path) as it:
        return {e.name: e for e in it}


def plan(src: Path, dst: Path, since_ns: int) -> SyncPlan:
    """What to remove from `dst` and copy from `src` so that `dst` is what `cp -a src dst` made."""
    out = SyncPlan()
    links: dict[tuple[int, int], list[str]] = {}  # the snapshot's multiply-linked files: inode -> names
    replaced_links: set[tuple[int, int]] = set()

    def walk(rel: str) -> None:
        s_dir, d_dir = os.path.join(src, rel), os.path.join(dst, rel)
        s_entries, d_entries = _entries(s_dir), _entries(d_dir)
        for name in sorted(d_entries.keys() - s_entries.keys()):
            out.remove.append(os.path.join(rel, name))
        for name in sorted(s_entries):
            r = os.path.join(rel, name)
            s = s_entries[name].stat(follow_symlinks=False)
            if stat.S_ISREG(s.st_mode) and s.st_nlink > 1:
                links.setdefault((s.st_dev, s.st_ino), []).append(r)
            d_entry = d_entries.get(name)
            if d_entry is None:
                out.copy.append(r)
                copied_whole(r, s)
                continue
            d = d_entry.stat(follow_symlinks=False)
            if stat.S_ISDIR(s.st_mode) and stat.S_ISDIR(d.st_mode):
                walk(r)
                if not _same_inode_attrs(s, d) or (s.st_mtime_ns != d.st_mtime_ns):
                    out.dirs.append(r)
                continue
            if stat.S_ISDIR(s.st_mode) != stat.S_ISDIR(d.st_mode) or not _unchanged(s, d, since_ns):
                out.remove.append(r)
                out.copy.append(r)
                copied_whole(r, s)

    def copied_whole(rel: str, s: os.stat_result) -> None:
        """`rel` comes back from the snapshot whole: each multiply-linked file in it (or it) has
        every one of its names copied with it, wherever they are."""
        if stat.S_ISREG(s.st_mode) and s.st_nlink > 1:
            replaced_links.add((s.st_dev, s.st_ino))
        elif stat.S_ISDIR(s.st_mode):
            for dirpath, dirnames, filenames in os.walk(os.path.join(src, rel)):
                dirnames.sort()
                for f in sorted(filenames):
                    fs = os.lstat(os.path.join(dirpath, f))
                    if stat.S_ISREG(fs.st_mode) and fs.st_nlink > 1:
                        inode = (fs.st_dev, fs.st_ino)
                        links.setdefault(inode, []).append(os.path.relpath(os.path.join(dirpath, f), src))
                        replaced_links.add(inode)

    walk("")
    # every name of a multiply-linked file one of whose names is replaced: copied together, linked
    copied = set(out.copy)
    for inode in sorted(replaced_links):
        for r in links[inode]:
            if r not in copied:
                out.remove.append(r)
                out.copy.append(r)
                copied.add(r)
    return out


def _within(rel: str, tops: set[str]) -> bool:
    """`rel` lies under one of `tops` (not `rel` itself)."""
    parts = rel.split(os.sep)
    return any(os.sep.join(parts[:i]) in tops for i in range(1, len(parts)))


def apply(src: Path, dst: Path, p: SyncPlan, log: Path) -> None:
    """Carry out `p`: remove, copy with one `cp -a --parents` (cwd: the snapshot; one call, so the
    names of a multiply-linked file are linked again), then put back the attributes and times of
    every directory kept whose entries or attributes changed, deepest first."""
    for r in p.remove:
        target = os.path.join(dst, r)
        if os.path.isdir(target) and not os.path.islink(target):
            shutil.rmtree(target)
        elif os.path.lexists(target):
            os.unlink(target)
    tops = set(p.copy)
    copy = [r for r in p.copy if not _within(r, tops)]  # a subtree copied whole brings its entries
    if copy:
        run([*CP_A, "--parents", "-t", str(dst), "--", *copy],
            what=f"copying {len(copy)} changed entries back into {dst}", log=log, error=LabError, cwd=src)  # fmt: skip
    touched = set(p.dirs) | {os.path.dirname(r) for r in p.remove + copy}
    for r in sorted(
        (d for d in touched if not _within(d, tops) and d not in tops),
        key=lambda x: x.count(os.sep) if x else -1,
        reverse=True,
    ):
        s = os.lstat(os.path.join(src, r) if r else src)
        target = os.path.join(dst, r) if r else str(dst)
        os.chown(target, s.st_uid, s.st_gid, follow_symlinks=False)
        os.chmod(target, stat.S_IMODE(s.st_mode))
        os.utime(target, ns=(s.st_atime_ns, s.st_mtime_ns), follow_symlinks=False)
