"""Resolve and download the dependency closure of a package list against a base rootfs, and
index a directory of .debs as a flat apt repository (`deb [trusted=yes] URL ./`).

Used by the rehearsal lab's interim repo and by the offline-bundle builder. The closure is
resolved inside an unpacked copy of the *target* image, so only what the nodes lack is fetched.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
from pathlib import Path

from appliance_cli.debian.rootfs import base_digest
from appliance_cli.errors import ApplianceError
from appliance_cli.fsutil import atomic_stream, atomic_write
from appliance_cli.proc import run

STAMP = ".closure.json"


class AptClosureError(ApplianceError):
    """Downloading or indexing packages failed."""


def closure_key(base_sha256: str, sources: str, packages: list[str]) -> str:
    text = json.dumps({"base": base_sha256, "sources": sources, "packages": sorted(set(packages))})
    return hashlib.sha256(text.encode()).hexdigest()


def _sources_path(root: Path, sources: str) -> Path:
    # deb822 (.sources) or one-line format (.list): apt tells them apart by file name.
    name = "closure.sources" if "Types:" in sources else "closure.list"
    return root / "etc/apt/sources.list.d" / name


def download_closure(
    base_rootfs_tar: Path, sources: str, packages: list[str], dest: Path, work_dir: Path
) -> list[Path]:
    """Download `packages` and every dependency the base image lacks into dest; return the .debs.

    Incremental: when dest holds a stamp for the same base digest, sources and package list,
    nothing is downloaded again.
    """
    dest.mkdir(parents=True, exist_ok=True)
    key = closure_key(base_digest(base_rootfs_tar), sources, packages)
    stamp = dest / STAMP
    if stamp.is_file():
        try:
            old = json.loads(stamp.read_text())
        except ValueError:
            old = {}
        cached = [dest / f for f in old.get("files", [])]
        if old.get("key") == key and cached and all(f.is_file() for f in cached):
            return cached

    work_dir.mkdir(parents=True, exist_ok=True)
    log = work_dir.with_name(work_dir.name + ".log")
    log.write_text("")
    root = work_dir / "root"
    if root.exists():
        shutil.rmtree(root)
    root.mkdir()
    run(
        ["tar", "--zstd", "--numeric-owner", "-C", str(root), "-xf", str(base_rootfs_tar)],
        what="unpacking the base rootfs",
        log=log,
        error=AptClosureError,
    )
    (root / "etc/apt/sources.list.d").mkdir(parents=True, exist_ok=True)
    _sources_path(root, sources).write_text(sources)
    shutil.copyfile("/etc/resolv.conf", root / "etc/resolv.conf")  # the chroot resolves the mirror
    archives = root / "var/cache/apt/archives"
    for old_deb in archives.glob("*.deb"):
        old_deb.unlink()
    run(
        ["chroot", str(root), "apt-get", "update", "-q"],
        what="apt-get update in the closure chroot",
        log=log,
        error=AptClosureError,
    )
    run(
        [
            "chroot",
            str(root),
            "env",
            "DEBIAN_FRONTEND=noninteractive",
            "apt-get",
            "install",
            "-y",
            "-q",
            "--download-only",
            "--no-install-recommends",
            *packages,
        ],
        what="apt-get install --download-only",
        log=log,
        error=AptClosureError,
    )
    if stamp.is_file():  # drop what the previous closure put here, keep unrelated files
        for name in json.loads(stamp.read_text()).get("files", []):
            (dest / name).unlink(missing_ok=True)
    files: list[Path] = []
    for deb in sorted(archives.glob("*.deb")):
        target = dest / deb.name
        shutil.move(str(deb), target)
        files.append(target)
    record = {"key": key, "packages": sorted(set(packages)), "files": [f.name for f in files]}
    atomic_write(stamp, json.dumps(record, indent=1))
    shutil.rmtree(root)
    return files


INDEX_STAMP = ".packages.json"  # what the index was made from (a dot file: the bundle skips it)


def _index_inputs(repo_dir: Path) -> list[list[object]]:
    """Every .deb dpkg-scanpackages would read, by what changes when its bytes do: path, size, and
    the inode's ctime (which no writer can set back) with the inode number."""
    out: list[list[object]] = []
    for deb in sorted(repo_dir.rglob("*.deb")):
        st = deb.stat()
        out.append([deb.relative_to(repo_dir).as_posix(), st.st_size, st.st_ctime_ns, st.st_ino])
    return out


def _file_sha256(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def index_flat_repo(repo_dir: Path) -> Path:
    """Write Packages + Packages.gz for every .deb below repo_dir (paths relative to it). Kept when
    the .debs and both index files are exactly what the last index was made from and wrote (its
    record, INDEX_STAMP): dpkg-scanpackages reads every package again, seconds per build."""
    packages = repo_dir / "Packages"
    gz = repo_dir / "Packages.gz"
    stamp = repo_dir / INDEX_STAMP
    inputs = _index_inputs(repo_dir)
    try:
        record = json.loads(stamp.read_text())
    except (OSError, ValueError):
        record = None
    if (
        isinstance(record, dict)
        and record.get("debs") == inputs
        and record.get("packages") == _file_sha256(packages)
        and record.get("packages_gz") == _file_sha256(gz)
    ):
        return packages
    index = run(
        ["dpkg-scanpackages", "--multiversion", ".", "/dev/null"],
        what=f"dpkg-scanpackages in {repo_dir}",
        cwd=repo_dir,
        hint="is dpkg-dev installed? (apt-get install dpkg-dev)",
        error=AptClosureError,
    )
    atomic_write(packages, index)
    # mtime=0 and a fixed name in the gzip header (the one the temporary file had before it was
    # fsutil's): the same package set gives the same bytes, so a rebuilt bundle keeps its digests.
    gz_name = str(repo_dir / "Packages.gz.tmp")
    with atomic_stream(gz) as raw, gzip.GzipFile(gz_name, "wb", 9, raw, mtime=0) as fh:
        fh.write(index.encode())
    done = {"debs": inputs, "packages": _file_sha256(packages), "packages_gz": _file_sha256(gz)}
    atomic_write(stamp, json.dumps(done))
    return packages
