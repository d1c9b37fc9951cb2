"""Pack one directory of a Debian package into a release-style tarball (`files: from_deb`).

For test stand-ins only: the rehearsal lab cannot download upstream release tarballs (e.g. the CNI
plugins), but its apt closure holds the distribution's build of the same programs. Packed the way
the upstream release is (the directory's files at the top, `./name`), the tarball goes through the
production path of the roles (download from the master, checksum, unpack) instead of a lab-only one.
The output is byte-for-byte reproducible (fixed owner, mtimes from the package, gzip mtime 0), so an
incremental build finds the blob already in the bundle.
"""

from __future__ import annotations

import gzip
import tarfile
from pathlib import Path

from debian.arfile import ArError
from debian.debfile import DebError, DebFile

from appliance_cli.errors import BundleError

PACK_VERSION = 1  # bump when the tarball's layout changes: cached packs are made again


def find_deb(repos: list[Path], package: str, label: str) -> Path:
    """The one `<package>_<version>_<arch>.deb` in the profile's apt repositories."""
    found = sorted({p for r in repos for p in r.rglob(f"{package}_*.deb")})
    if len(found) != 1:
        what = (
            "is not" if not found else f"is there {len(found)} times ({', '.join(p.name for p in found)}) in"
        )
        raise BundleError(
            f"{label}: package {package} {what} in this profile's apt closure",
            hint="list it (once) in the packages of an apt entry of the same profile",
        )
    return found[0]


def pack_deb_dir(deb: Path, path: str, out: Path, label: str) -> int:
    """Write `out` (.tar.gz) with the regular files directly under `path` in `deb`; returns their count."""
    prefix = "./" + path.strip("/") + "/"
    try:
        data = DebFile(str(deb)).data.tgz()
        members = sorted(
            (m for m in data.getmembers() if _in_dir(m.name, prefix) and m.isfile()),
            key=lambda m: m.name,
        )
        if not members:
            raise BundleError(f"{label}: {deb.name} has no files under /{path.strip('/')}")
        # level 6: what release tarballs use; 9 takes twice as long for 2% less
        with (
            open(out, "wb") as raw,
            gzip.GzipFile("", "wb", 6, raw, mtime=0) as gz,
            tarfile.open(fileobj=gz, mode="w", format=tarfile.GNU_FORMAT) as tar,
        ):
            for m in members:
                info = tarfile.TarInfo("./" + m.name.rsplit("/", 1)[1])
                info.size, info.mtime, info.mode = m.size, m.mtime, m.mode & 0o7777
                info.uid = info.gid = 0
                info.uname = info.gname = "root"
                tar.addfile(info, data.extractfile(m))
    except (DebError, tarfile.TarError, OSError) as exc:
        out.unlink(missing_ok=True)
        raise BundleError(f"{label}: cannot repack {deb.name}: {exc}") from None
    return len(members)


def extract_file(deb: Path, member: str, out: Path, label: str) -> None:
    """Write the one regular file `member` of `deb` to `out`, its bytes unchanged."""
    try:
        data = DebFile(str(deb)).data.tgz()
        info = next(
            (m for m in data.getmembers() if m.name.removeprefix("./") == member and m.isfile()), None
        )
        if info is None:
            raise BundleError(f"{label}: {deb.name} has no file /{member}")
        src = data.extractfile(info)
        assert src is not None  # a regular file
        out.write_bytes(src.read())
    except (DebError, tarfile.TarError, OSError) as exc:
        out.unlink(missing_ok=True)
        raise BundleError(f"{label}: cannot read /{member} of {deb.name}: {exc}") from None


def read_files(deb: Path, members: list[str], label: str) -> dict[str, tuple[bytes, int]]:
    """The regular files `members` of `deb`'s data, each with its bytes and permission bits."""
    try:
        data = DebFile(str(deb)).data.tgz()
        found = {m.name.removeprefix("./"): m for m in data.getmembers() if m.isfile()}
        missing = [m for m in members if m not in found]
        if missing:
            raise BundleError(f"{label}: {deb.name} has no file /{missing[0]}")
        out = {}
        for m in members:
            src = data.extractfile(found[m])
            assert src is not None  # a regular file
            out[m] = (src.read(), found[m].mode & 0o777)
        return out
    except (ArError, DebError, tarfile.TarError, OSError) as exc:
        raise BundleError(f"{label}: cannot read {deb.name}: {exc}") from None


def _in_dir(name: str, prefix: str) -> bool:
    """Directly inside the directory (not in a subdirectory of it)."""
    name = name if name.startswith("./") else "./" + name
    return name.startswith(prefix) and "/" not in name[len(prefix) :]
