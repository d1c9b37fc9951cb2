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
import subprocess
from pathlib import Path

from appliance_cli.errors import ApplianceError

STAMP = ".closure.json"


class AptClosureError(ApplianceError):
    """Downloading or indexing packages failed."""


def _run(argv: list[str], what: str, log: Path, **kw: object) -> subprocess.CompletedProcess[str]:
    res = subprocess.run(argv, capture_output=True, text=True, check=False, **kw)  # type: ignore[call-overload]
    with log.open("a") as fh:
        fh.write(f"$ {' '.join(argv)}\n{res.stdout}{res.stderr}")
    if res.returncode != 0:
        last = (res.stderr.strip().splitlines() or [f"exit code {res.returncode}"])[-1]
        raise AptClosureError(f"{what} failed: {last}", hint=f"see {log}")
    return res


def _digest(path: Path) -> str:
    side = path.with_name(path.name + ".sha256")  # written by the lab's rootfs builder
    if side.is_file() and side.stat().st_mtime >= path.stat().st_mtime:
        return side.read_text().strip()
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def closure_key(base_digest: str, sources: str, packages: list[str]) -> str:
    text = json.dumps({"base": base_digest, "sources": sources, "packages": sorted(set(packages))})
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
    key = closure_key(_digest(base_rootfs_tar), sources, packages)
    stamp = dest / STAMP
    if stamp.is_file():
        try:
            old = json.loads(stamp.read_text())
        except ValueError:
            old = {}
        files = [dest / f for f in old.get("files", [])]
        if old.get("key") == key and files and all(f.is_file() for f in files):
            return files

    work_dir.mkdir(parents=True, exist_ok=True)
    log = work_dir.with_name(work_dir.name + ".log")
    log.write_text("")
    root = work_dir / "root"
    if root.exists():
        shutil.rmtree(root)
    root.mkdir()
    _run(
        ["tar", "--zstd", "--numeric-owner", "-C", str(root), "-xf", str(base_rootfs_tar)],
        "unpacking the base rootfs",
        log,
    )
    (root / "etc/apt/sources.list.d").mkdir(parents=True, exist_ok=True)
    _sources_path(root, sources).write_text(sources)
    shutil.copyfile("/etc/resolv.conf", root / "etc/resolv.conf")  # the chroot resolves the mirror
    archives = root / "var/cache/apt/archives"
    for old_deb in archives.glob("*.deb"):
        old_deb.unlink()
    _run(["chroot", str(root), "apt-get", "update", "-q"], "apt-get update in the closure chroot", log)
    _run(
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
        "apt-get install --download-only",
        log,
    )
    if stamp.is_file():  # drop what the previous closure put here, keep unrelated files
        for name in json.loads(stamp.read_text()).get("files", []):
            (dest / name).unlink(missing_ok=True)
    files: list[Path] = []
    for deb in sorted(archives.glob("*.deb")):
        target = dest / deb.name
        shutil.move(str(deb), target)
        files.append(target)
    stamp.write_text(
        json.dumps(
            {"key": key, "packages": sorted(set(packages)), "files": [f.name for f in files]}, indent=1
        )
    )
    shutil.rmtree(root)
    return files


def index_flat_repo(repo_dir: Path) -> Path:
    """Write Packages + Packages.gz for every .deb below repo_dir (paths relative to it)."""
    res = subprocess.run(
        ["dpkg-scanpackages", "--multiversion", ".", "/dev/null"],
        cwd=repo_dir,
        capture_output=True,
        text=True,
        check=False,
    )
    if res.returncode != 0:
        last = (res.stderr.strip().splitlines() or [f"exit code {res.returncode}"])[-1]
        raise AptClosureError(
            f"dpkg-scanpackages in {repo_dir} failed: {last}",
            hint="is dpkg-dev installed? (apt-get install dpkg-dev)",
        )
    packages = repo_dir / "Packages"
    tmp = repo_dir / "Packages.tmp"
    tmp.write_text(res.stdout)
    tmp.replace(packages)
    gz_tmp = repo_dir / "Packages.gz.tmp"
    # mtime=0: the same package set gives the same bytes, so a rebuilt bundle keeps its blob digests.
    with open(gz_tmp, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=9, mtime=0) as fh:
        fh.write(res.stdout.encode())
    gz_tmp.replace(repo_dir / "Packages.gz")
    return packages
