"""Read an apt archive's indexes without apt and without the target OS: the sources lines, each
suite's InRelease (or Release + Release.gpg), and the Packages files those list, checked against
the sha256 the Release file records. Signatures are checked with `gpgv` when a keyring is given
(`TrustedKeys`: the keyring and the pinned fingerprints of the keys whose signature counts).

Every URL is read through a `fetch(url) -> bytes` the caller supplies (it may rewrite URLs to a
mirror); an exception from it is reported as one line naming the URL.
"""

from __future__ import annotations

import gzip
import hashlib
import lzma
import subprocess
import tempfile
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from pathlib import Path

from debian.deb822 import Packages, Release

from appliance_cli.debian.aptclosure import AptClosureError

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


@dataclass(frozen=True)
class TrustedKeys:
    """An archive keyring for gpgv and the primary-key fingerprints whose signatures count: a Release
    file must carry a good signature by one of them. `fingerprints` None: any key of the keyring."""

    keyring: Path
    fingerprints: frozenset[str] | None = None


Keyring = Path | TrustedKeys
# MD5, SHA-1, RIPEMD-160: gpgv 2.2 still calls these good; apt refuses a Release signed so (weak)
WEAK_DIGESTS = {"1": "MD5", "2": "SHA1", "3": "RIPEMD160"}
CLEARSIGN_BEGIN = b"-----BEGIN PGP SIGNED MESSAGE-----"
SIGNATURE_BEGIN = b"-----BEGIN PGP SIGNATURE-----"
SIGNATURE_END = b"-----END PGP SIGNATURE-----"
UNSIGNED_HINT = (
    "the archive signs its indexes: something between here and it (a proxy, a mirror, a man in the "
    "middle) served an unsigned or altered file; use the archive or a mirror that serves it as published"
)


def _trust(keyring: Keyring | None) -> TrustedKeys | None:
    return TrustedKeys(keyring) if isinstance(keyring, Path) else keyring


def _not_one_clearsigned_message(data: bytes) -> str | None:
    """Why `data` is not exactly one clear-signed message (None: it is). apt refuses the same: a
    second message or text after the signature would be read as index content gpgv never covered."""
    lines = [line.rstrip(b" \t\r") for line in data.split(b"\n")]
    if lines[0] != CLEARSIGN_BEGIN:
        return "not signed (it is not an OpenPGP clear-signed message)"
    if (lines.count(CLEARSIGN_BEGIN), lines.count(SIGNATURE_BEGIN), lines.count(SIGNATURE_END)) != (1, 1, 1):
        return "not one signed message (it holds several, or a broken one)"
    end = lines.index(SIGNATURE_END)
    if lines.index(SIGNATURE_BEGIN) > end or any(lines[end + 1 :]):
        return "text follows its signature"
    return None


@dataclass
class _Sig:
    """One signature as gpgv's --status-fd reports it (between two NEWSIG lines)."""

    codes: set[str]
    key: str = ""  # the key id or fingerprint gpgv names
    primary: str = ""  # VALIDSIG: the primary key's fingerprint
    digest: str = ""  # VALIDSIG: the hash algorithm's number (RFC 4880 9.4)


def _signatures(status: str) -> list[_Sig]:
    sigs: list[_Sig] = []
    for line in status.splitlines():
        parts = line.split()
        if len(parts) < 2 or parts[0] != "[GNUPG:]":
            continue
        code = parts[1]
        if code == "NEWSIG":
            sigs.append(_Sig(set()))
            continue
        if not sigs:
            continue
        sig = sigs[-1]
        sig.codes.add(code)
        if code in ("GOODSIG", "BADSIG", "EXPSIG", "EXPKEYSIG", "REVKEYSIG", "ERRSIG") and len(parts) > 2:
            sig.key = sig.key or parts[2]
        if code == "ERRSIG" and len(parts) > 8:
            sig.key = parts[-1]  # gpg >= 2.2.7 appends the issuer's fingerprint
        if code == "VALIDSIG" and len(parts) >= 11:
            sig.key, sig.digest = parts[2], parts[9]
            sig.primary = parts[11] if len(parts) >= 12 else parts[2]
    return sigs


def verify_signed(
    trust: TrustedKeys, what: str, url: str, signed: bytes, data: bytes | None = None
) -> tuple[str, list[str]]:
    """Check `signed` with gpgv: an InRelease (clear-signed, `data` None), or Release.gpg over
    `data`. Returns the text the signature covers and the pinned primary fingerprints that signed
    it. Refused, one line naming `what` and `url`: not one clear-signed message, any BAD signature,
    or no good signature (valid, not expired, not revoked, not over a weak digest) by a pinned key. A signature by a key
    the keyring lacks is ignored, as apt does (Debian signs with the next release's key too)."""
    if data is None:
        why = _not_one_clearsigned_message(signed)
        if why:
            raise AptResolveError(f"{what} ({url}): {why}", hint=UNSIGNED_HINT)
    with tempfile.TemporaryDirectory(prefix="aptindex-") as tmp:
        sig_path, out_path = Path(tmp) / "signed", Path(tmp) / "out"
        sig_path.write_bytes(signed)
        argv = ["gpgv", "--status-fd", "1", "--keyring", str(trust.keyring.resolve())]
        if data is None:
            argv += ["--output", str(out_path), str(sig_path)]
        else:
            (Path(tmp) / "data").write_bytes(data)
            argv += [str(sig_path), str(Path(tmp) / "data")]
        try:
            res = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL, check=False)
        except FileNotFoundError:
            raise AptResolveError(
                f"checking {what}: gpgv is not installed", hint="apt-get install gpgv"
            ) from None
        text = out_path.read_bytes().decode() if data is None and out_path.is_file() else ""
    sigs = _signatures(res.stdout)
    bad = [s.key for s in sigs if "BADSIG" in s.codes]
    if bad:
        raise AptResolveError(
            f"{what} ({url}): BAD signature by key {bad[0]}: the file was changed after it was signed",
            hint=UNSIGNED_HINT,
        )
    dead = {"BADSIG", "ERRSIG", "EXPSIG", "EXPKEYSIG", "REVKEYSIG"}
    good = [
        s.primary
        for s in sigs
        if {"GOODSIG", "VALIDSIG"} <= s.codes and not s.codes & dead and s.digest not in WEAK_DIGESTS
    ]
    pinned = trust.fingerprints
    ok = sorted({p for p in good if pinned is None or p in pinned})
    if ok and (data is not None or text):
        return (text if data is None else data.decode()), ok
    if not sigs:
        detail = (res.stderr.strip().splitlines() or [f"gpgv exit code {res.returncode}"])[-1]
        raise AptResolveError(f"{what} ({url}): not signed ({detail})", hint=UNSIGNED_HINT)
    seen = ", ".join(_describe(s) for s in sigs)
    want = f"; pinned: {', '.join(sorted(pinned))}" if pinned is not None else f" in {trust.keyring}"
    raise AptResolveError(
        f"{what} ({url}): no good signature by a trusted key (signed by {seen}{want})",
        hint=f"{UNSIGNED_HINT}; if the archive really changed keys, pin the new one after checking it",
    )


def _describe(sig: _Sig) -> str:
    for code, why in (("EXPKEYSIG", "expired"), ("REVKEYSIG", "revoked"), ("EXPSIG", "signature expired")):
        if code in sig.codes:
            return f"{sig.key} ({why})"
    if sig.digest in WEAK_DIGESTS:
        return f"{sig.primary} (over {WEAK_DIGESTS[sig.digest]}, a weak digest)"
    if "NO_PUBKEY" in sig.codes or "ERRSIG" in sig.codes:
        return f"{sig.key or 'an unknown key'} (not in the keyring)"
    return sig.primary or sig.key or "an unreadable signature"


@dataclass(frozen=True)
class ReleaseFile:
    fields: Release
    url: str
    sha256: str  # of the bytes read (InRelease: signature included)
    signed: bool  # checked with gpgv against the caller's keyring
    signers: tuple[str, ...] = ()  # primary fingerprints of the trusted keys that signed it


def _release(url: str, data: bytes, text: str, signers: list[str] | None) -> ReleaseFile:
    return ReleaseFile(
        Release(text), url, hashlib.sha256(data).hexdigest(), signers is not None, tuple(signers or ())
    )


def _current(source: Source, release: ReleaseFile, what: str) -> ReleaseFile:
    """A signed Release must be the suite's own and still valid: a validly signed Release of another
    suite, or an expired one, is what a man in the middle replays to hold back security updates."""
    fields = release.fields
    if not source.flat and source.suite not in (fields.get("Suite"), fields.get("Codename")):
        raise AptResolveError(
            f"{what} ({release.url}) is signed for suite {fields.get('Suite', '?')} "
            f"(codename {fields.get('Codename', '?')}), not {source.suite}",
            hint="a signed index of another suite was served in its place: check the mirror",
        )
    until = fields.get("Valid-Until")
    if until:
        try:
            expiry = parsedate_to_datetime(until)
        except (TypeError, ValueError):
            raise AptResolveError(f"{what} ({release.url}): unreadable Valid-Until {until!r}") from None
        if expiry.tzinfo is None:
            expiry = expiry.replace(tzinfo=UTC)
        if expiry < datetime.now(UTC):
            raise AptResolveError(
                f"{what} ({release.url}) expired on {until} (Valid-Until)",
                hint="a stale copy was served (a frozen mirror, or a replay): use a mirror that is current",
            )
    return release


def read_release(source: Source, fetch: Fetch, keyring: Keyring | None = None) -> ReleaseFile:
    """The suite's InRelease, else its Release (with Release.gpg when a keyring is given)."""
    where = f"{source.base} {source.suite}"
    trust = _trust(keyring)
    url = source.dist_url("InRelease")
    data = _maybe(fetch, url)
    if data is not None:
        if trust is None:
            return _release(url, data, data.decode(), None)
        text, signers = verify_signed(trust, f"InRelease of {where}", url, data)
        return _current(source, _release(url, data, text, signers), f"InRelease of {where}")
    url = source.dist_url("Release")
    data = get(fetch, url, f"the Release file of {where}")
    if trust is None:
        return _release(url, data, data.decode(), None)
    sig = _maybe(fetch, url + ".gpg")
    if sig is None:
        raise AptResolveError(
            f"Release of {where} ({url}): not signed (no InRelease, no Release.gpg)", hint=UNSIGNED_HINT
        )
    _, signers = verify_signed(trust, f"Release of {where}", url + ".gpg", sig, data)
    return _current(source, _release(url, data, data.decode(), signers), f"Release of {where}")


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
    sources: str, arch: str, fetch: Fetch, keyring: Keyring | None = None
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
