"""Read an apt archive's indexes without apt and without the target OS: the sources lines, each
suite's InRelease (or Release + Release.gpg), and the Packages files those list, checked against
the sha256 the Release file records. Signatures are checked with `gpgv` when a keyring is given.

Every URL is read through a `fetch(url) -> bytes` the caller supplies (it may rewrite URLs to a
mirror); an exception from it is reported as one line naming the URL.
"""

from __future__ import annotations

import gzip
import hashlib
import lzma
import tempfile
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from debian.deb822 import Packages, Release

from appliance_cli.debian.aptclosure import AptClosureError
from appliance_cli.proc import run

Fetch = Callable[[str], bytes]
# Compressions apt reads, best first; the first one the Release file lists is fetched.
COMPRESSIONS: dict[str, Callable[[bytes], bytes]] = {
    ".xz": lzma.decompress,
    ".gz": gzip.decompress,
    "": lambda b: b,
}
FIELDS = ["Package", "Version", "Architecture", "Filename", "SHA256", "Size", "Depends", "Pre-Depends"]
FIELDS += ["Provides", "Essential", "Priority", "Multi-Arch"]
SOURCES_HINT = "sources are one-line apt entries: 'deb URL SUITE COMPONENT...' (or 'deb URL DIR/')"


class AptResolveError(AptClosureError):
    """Reading the archive's indexes or resolving the package closure failed."""


@dataclass(frozen=True)
class Source:
    """One `deb` line. A flat repository (`deb URL ./`) has a suite ending in / and no components."""

    base: str
    suite: str
    components: tuple[str, ...]

    @property
    def flat(self) -> bool:
        return self.suite.endswith("/")

    def dist_url(self, name: str) -> str:
        if self.flat:
            return f"{self.base}/{self.suite.rstrip('/')}/{name}".replace("/./", "/")
        return f"{self.base}/dists/{self.suite}/{name}"


@dataclass(frozen=True)
class IndexFile:
    """A Packages file as read and checked: what a lock file records about where a package came from."""

    source: Source
    component: str
    url: str
    sha256: str  # of the (compressed) file, as the Release file lists it and as fetched
    size: int
    release_url: str
    release_sha256: str  # of the InRelease / Release bytes read
    signed: bool  # the Release was checked with gpgv against the caller's keyring


@dataclass(frozen=True)
class Candidate:
    """One package version from an index, with the fields the resolver needs."""

    name: str
    version: str
    arch: str
    filename: str
    sha256: str
    size: int
    depends: str
    pre_depends: str
    provides: str
    essential: bool
    priority: str
    multi_arch: str
    index: IndexFile


def parse_sources(text: str) -> list[Source]:
    """The `deb` lines of one-line apt sources text; comments, blanks and deb-src are skipped."""
    if any(line.strip().startswith("Types:") for line in text.splitlines()):
        raise AptResolveError("deb822 sources (Types:/URIs:) are not supported here", hint=SOURCES_HINT)
    out = []
    for raw in text.splitlines():
        words = raw.split("#", 1)[0].split()
        if not words or words[0] == "deb-src":
            continue
        if words[0] != "deb":
            raise AptResolveError(f"not an apt sources line: {raw.strip()!r}", hint=SOURCES_HINT)
        words = words[1:]
        if words and words[0].startswith("["):  # options: [arch=amd64 signed-by=...]
            while words and not words[0].endswith("]"):
                words = words[1:]
            words = words[1:]
        if len(words) < 2 or (len(words) == 2 and not words[1].endswith("/")):
            raise AptResolveError(
                f"apt sources line needs URL SUITE COMPONENT: {raw.strip()!r}", hint=SOURCES_HINT
            )
        out.append(Source(words[0].rstrip("/"), words[1], tuple(words[2:])))
    if not out:
        raise AptResolveError("no 'deb' line in the apt sources", hint=SOURCES_HINT)
    return out


def get(fetch: Fetch, url: str, what: str) -> bytes:
    try:
        return fetch(url)
    except AptClosureError:
        raise
    except Exception as exc:
        detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise AptResolveError(
            f"cannot fetch {what} ({url}): {detail}", hint="is the mirror reachable and the suite right?"
        ) from exc


def _maybe(fetch: Fetch, url: str) -> bytes | None:
    try:
        return fetch(url)
    except AptClosureError:
        raise
    except Exception:
        return None


def _gpgv(keyring: Path, what: str, *files: bytes) -> str:
    """Verify with gpgv: (signed-inline) -> its verified content; (signature, data) -> data."""
    with tempfile.TemporaryDirectory(prefix="aptindex-") as tmp:
        paths = []
        for i, data in enumerate(files):
            p = Path(tmp) / f"f{i}"
            p.write_bytes(data)
            paths.append(str(p))
        argv = ["gpgv", "--keyring", str(keyring.resolve())]
        argv += ["--output", "-", paths[0]] if len(paths) == 1 else paths
        out = run(
            argv,
            what=f"checking the signature of {what} with gpgv",
            hint=f"is {keyring} the archive's keyring? (apt-get install gpgv)",
            error=AptResolveError,
        )
    return out if len(paths) == 1 else files[1].decode()


@dataclass(frozen=True)
class ReleaseFile:
    fields: Release
    url: str
    sha256: str  # of the bytes read (InRelease: signature included)
    signed: bool  # checked with gpgv against the caller's keyring


def _release(url: str, data: bytes, text: str, signed: bool) -> ReleaseFile:
    return ReleaseFile(Release(text), url, hashlib.sha256(data).hexdigest(), signed)


def read_release(source: Source, fetch: Fetch, keyring: Path | None = None) -> ReleaseFile:
    """The suite's InRelease, else its Release (with Release.gpg when a keyring is given)."""
    where = f"{source.base} {source.suite}"
    url = source.dist_url("InRelease")
    data = _maybe(fetch, url)
    if data is not None:
        text = _gpgv(keyring, f"InRelease of {where}", data) if keyring else data.decode()
        return _release(url, data, text, keyring is not None)
    url = source.dist_url("Release")
    data = get(fetch, url, f"the Release file of {where}")
    if keyring is None:
        return _release(url, data, data.decode(), False)
    sig = _maybe(fetch, url + ".gpg")
    if sig is None:
        raise AptResolveError(
            f"{where} is not signed (no InRelease, no Release.gpg)",
            hint="drop the keyring only for a trusted local repository",
        )
    _gpgv(keyring, f"Release of {where}", sig, data)
    return _release(url, data, data.decode(), True)


def _listed(release: Release, name: str) -> dict[str, str] | None:
    for entry in release.get("SHA256", []):
        if entry["name"] == name:
            return entry
    return None


def read_packages(
    source: Source, release: ReleaseFile, component: str, arch: str, fetch: Fetch
) -> tuple[IndexFile, bytes]:
    """Fetch one Packages file (xz, else gz, else plain: whichever Release lists first), check its
    sha256 and size against the Release file and return it, decompressed."""
    where = f"{source.suite} {component}".strip()
    stem = "Packages" if source.flat else f"{component}/binary-{arch}/Packages"
    for ext in COMPRESSIONS:
        entry = _listed(release.fields, stem + ext)
        if entry is not None:
            break
    else:
        raise AptResolveError(
            f"the Release file of {source.base} {source.suite} lists no {stem}(.xz|.gz) with a SHA256",
            hint=f"is {component!r} a component of {source.suite} and {arch} one of its architectures?",
        )
    url = source.dist_url(stem + ext)
    data = get(fetch, url, f"the Packages file of {where}")
    actual = hashlib.sha256(data).hexdigest()
    if actual != entry["sha256"] or len(data) != int(entry["size"]):
        raise AptResolveError(
            f"Packages file of {where} ({url}) has sha256 {actual} ({len(data)} bytes) but "
            f"{release.url.rsplit('/', 1)[-1]} says {entry['sha256']} ({entry['size']} bytes)",
            hint="the mirror is inconsistent (mid-sync?) or tampered with: retry, or use another mirror",
        )
    index = IndexFile(source, component, url, actual, len(data), release.url, release.sha256, release.signed)
    try:
        return index, COMPRESSIONS[ext](data)
    except (OSError, lzma.LZMAError, EOFError) as exc:
        raise AptResolveError(
            f"cannot decompress {url}: {exc}", hint="the mirror serves a broken file"
        ) from exc


def _candidate(para: Packages, index: IndexFile) -> Candidate:
    return Candidate(
        name=para["Package"],
        version=para["Version"],
        arch=para["Architecture"],
        filename=para["Filename"],
        sha256=para["SHA256"],
        size=int(para["Size"]),
        depends=para.get("Depends", ""),
        pre_depends=para.get("Pre-Depends", ""),
        provides=para.get("Provides", ""),
        essential=para.get("Essential", "no") == "yes",
        priority=para.get("Priority", "optional"),
        multi_arch=para.get("Multi-Arch", "no"),
        index=index,
    )


def parse_packages(text: bytes, index: IndexFile, arch: str) -> Iterator[Candidate]:
    """The packages of a Packages file that install on `arch` (its own and Architecture: all)."""
    for para in Packages.iter_paragraphs(text.splitlines(keepends=True), fields=FIELDS, use_apt_pkg=False):
        if "Package" not in para:
            continue
        missing = [f for f in ("Version", "Architecture", "Filename", "SHA256", "Size") if f not in para]
        if missing:
            raise AptResolveError(
                f"package {para['Package']} in {index.url} has no {', '.join(missing)}",
                hint="the index is not a binary Packages file with SHA256 sums",
            )
        if para["Architecture"] in (arch, "all"):
            yield _candidate(para, index)


def load_candidates(
    sources: str, arch: str, fetch: Fetch, keyring: Path | None = None
) -> tuple[list[IndexFile], list[Candidate]]:
    """Every Packages file the sources name (in their order) and every package they list."""
    indexes: list[IndexFile] = []
    candidates: list[Candidate] = []
    for source in parse_sources(sources):
        release = read_release(source, fetch, keyring)
        for component in source.components or ("",):
            index, text = read_packages(source, release, component, arch, fetch)
            indexes.append(index)
            candidates += parse_packages(text, index, arch)
    return indexes, candidates


def http_fetch(url: str, timeout: float = 60) -> bytes:
    """A plain `fetch` for callers without a mirror map: urllib, no proxy rewriting."""
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return bytes(resp.read())


def http_fetch_to(url: str, dest: Path, timeout: float = 60) -> None:
    """A plain `fetch_to`: stream url into dest."""
    with urllib.request.urlopen(url, timeout=timeout) as resp, open(dest, "wb") as out:
        while chunk := resp.read(1 << 20):
            out.write(chunk)
